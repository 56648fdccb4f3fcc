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

import importlib.util

from platform_plugin.util.procfs import ancestors


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
