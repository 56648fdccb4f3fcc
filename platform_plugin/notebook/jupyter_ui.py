"""The MLflow UI inside Jupyter: served through the Jupyter server the user's browser already
reaches (jupyter-server-proxy), so links work on the platform where 127.0.0.1:5000 is the
server's loopback, not the user's.

jupyter-server-proxy forwards `<base_url>proxy/<port>/...` to `127.0.0.1:<port>/...` with the
prefix removed; MLflow's UI uses relative URLs for its static files and its ajax API, so it
works under that prefix without `--static-prefix`. A link is a path (`/user/x/proxy/5000/`):
the browser completes it with the origin it already uses for JupyterLab.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import tempfile

from platform_plugin.util.procfs import ancestors
from platform_plugin.util.ports import free_port

_UI: dict[str, tuple] = {}  # store uri -> (process, port): one UI per store per kernel


def jupyter_server() -> dict | None:
    """The running Jupyter server this process descends from (a kernel or a terminal of it),
    as `jupyter_server.serverapp.list_running_servers()` describes it, or None."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    mine = ancestors()
    for info in list_running_servers():
        if info.get("pid") in mine:
            return info
    return None


def proxy_available() -> bool:
    return importlib.util.find_spec("jupyter_server_proxy") is not None


def browser_base(port: int, server: dict | None = None) -> str:
    """The UI's base URL as the user's browser can open it."""
    server = server if server is not None else jupyter_server()
    if server is not None and proxy_available():
        return f"{server.get('base_url', '/').rstrip('/')}/proxy/{port}/"
    return f"http://127.0.0.1:{port}/"


def reachable(port: int, server: dict | None) -> bool:
    """Whether the UI answers through the Jupyter server (asked the way the browser would)."""
    if server is None or not proxy_available():
        return False
    import requests

    local = server["url"].rstrip("/") + f"/proxy/{port}/health"
    headers = {"Authorization": f"token {server['token']}"} if server.get("token") else {}
    try:
        return requests.get(local, headers=headers, timeout=10).ok
    except requests.RequestException:
        return False


def ensure_ui(store_uri: str) -> int:
    """Start (once per kernel and store) a lean MLflow UI on a free loopback port; it stops
    when the kernel exits. Returns the port."""
    from platform_plugin.tracking.server import HOST, start_server, stop_server, wait_healthy

    known = _UI.get(store_uri)
    if known and known[0].poll() is None:
        return known[1]
    port = free_port()
    log = os.path.join(tempfile.gettempdir(), f"platform-mlflow-ui-{port}.log")
    proc = start_server(store_uri, port, log_path=log)
    wait_healthy(f"http://{HOST}:{port}", proc, log_path=log)
    atexit.register(stop_server, proc)
    _UI[store_uri] = (proc, port)
    return port
