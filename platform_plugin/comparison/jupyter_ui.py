"""The MLflow UI inside Jupyter, for the comparison's views (`platform-run ui`, the notebook's
view.py): served through the Jupyter server the user's browser already reaches
(jupyter-server-proxy), so links work on the platform where 127.0.0.1:5000 is the server's
loopback, not the user's.

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

from platform_plugin.launcher.processes.spawn import Lifeline
from platform_plugin.tracking.server.local import HOST, start_server, stop_server, wait_healthy
from platform_plugin.util.ports import free_port
from platform_plugin.util.procfs import ancestors

UI_STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL, for a UI whose owner died
_UI: dict[str, OwnedUI] = {}  # store uri -> its UI: one per store per kernel


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


class OwnedUI:
    """A lean MLflow UI server that lives as long as the process that started it. `stop()`
    ends it; when this process dies without stopping it (a SIGKILLed kernel, a closed
    terminal: atexit never runs) its lifeline (launcher/processes/spawn.py, the one the ranks have)
    stops the server's process group, which holds uvicorn's worker too (the server runs in a
    session of its own)."""

    def __init__(self, store_uri: str, port: int, log_path: str) -> None:
        self.port, self.log_path = port, log_path
        self._stopped = False
        self._lifeline = Lifeline.for_groups(UI_STOP_GRACE_S)  # first: no moment without it
        try:
            self.proc = start_server(store_uri, port, log_path=log_path)
        except BaseException:
            self._lifeline.release()
            raise
        self._lifeline.add(self.proc.pid)  # pid == pgid: start_new_session

    def wait_healthy(self) -> None:
        try:
            wait_healthy(f"http://{HOST}:{self.port}", self.proc, log_path=self.log_path)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Idempotent (atexit, an error path and a `finally` may each call it)."""
        if self._stopped:
            return
        self._stopped = True
        stop_server(self.proc)
        self._lifeline.release()


def ensure_ui(store_uri: str) -> int:
    """Start (once per kernel and store) a lean MLflow UI on a free loopback port; it stops
    when the kernel exits, however it exits. Returns the port."""
    known = _UI.get(store_uri)
    if known and known.proc.poll() is None:
        return known.port
    if known:
        known.stop()  # it died on its own: its lifeline goes too
    port = free_port()
    log = os.path.join(tempfile.gettempdir(), f"platform-mlflow-ui-{port}.log")
    ui = OwnedUI(store_uri, port, log)
    ui.wait_healthy()
    atexit.register(ui.stop)
    _UI[store_uri] = ui
    return port
