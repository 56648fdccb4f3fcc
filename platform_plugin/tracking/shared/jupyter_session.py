"""The notebook a Jupyter kernel runs, as its Jupyter server says at this moment.

jupyter_server puts the notebook's path in a kernel's environment (JPY_SESSION_NAME) when it
starts the kernel; a rename in JupyterLab afterwards moves the session (`PATCH /api/sessions`),
not the variable, so a job started from "Untitled.ipynb" renamed to "resnet.ipynb" would still
land in the experiment "Untitled". The server's sessions API says the path now: the session
whose kernel is this process. Stdlib only (urllib); any failure answers None and the variable
is used."""
from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any, Mapping

from platform_plugin.util.procfs import ancestors
from platform_plugin.util.regular_file import read_json

TIMEOUT_S = 2.0  # the server is on this machine: a bound, not a wait
MAX_RUNTIME_FILE_BYTES = 64 << 10  # a jpserver-<pid>.json is a few hundred bytes


def current_notebook(environ: Mapping[str, str]) -> str | None:
    """The path (relative to the server's root) of the notebook this kernel runs, or None
    outside a kernel that a Jupyter server started."""
    kernel = kernel_id()
    if kernel is None:
        return None
    for server in jupyter_servers(environ):
        try:
            sessions = _get(server, "api/sessions")
        except (OSError, ValueError):
            continue
        for session in sessions if isinstance(sessions, list) else []:
            if (session.get("kernel") or {}).get("id") == kernel and session.get("path"):
                return str(session["path"])
    return None


def kernel_id() -> str | None:
    """This kernel's id, from its connection file's name (`kernel-<id>.json`)."""
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    if kernelapp is None or not kernelapp.IPKernelApp.initialized():
        return None
    name = os.path.basename(kernelapp.IPKernelApp.instance().connection_file or "")
    if not (name.startswith("kernel-") and name.endswith(".json")):
        return None
    return name[len("kernel-"):-len(".json")]


def jupyter_servers(environ: Mapping[str, str]) -> list[dict]:
    """The Jupyter servers this process descends from (their `jpserver-<pid>.json`)."""
    folder = environ.get("JUPYTER_RUNTIME_DIR")
    if not folder:
        from jupyter_core.paths import jupyter_runtime_dir  # jupyter: only inside a kernel

        folder = jupyter_runtime_dir()
    mine = ancestors()
    found = []
    for path in glob.glob(os.path.join(folder, "jpserver-*.json")):
        try:  # a runtime folder's file, read as util/regular_file reads what others may write
            info = read_json(path, MAX_RUNTIME_FILE_BYTES, within=folder)
        except (OSError, ValueError):  # a FIFO, a link, too large or deep, no JSON: no server
            continue
        if isinstance(info, dict) and info.get("pid") in mine and info.get("url"):
            found.append(info)
    return found


def _get(server: dict, route: str) -> Any:
    import urllib.request  # here: ssl, http.client and email, only inside a Jupyter kernel

    request = urllib.request.Request(server["url"].rstrip("/") + "/" + route)
    if server.get("token"):
        request.add_header("Authorization", f"token {server['token']}")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 - loopback
        return json.loads(answer.read().decode("utf-8"))
