"""A real JupyterLab (jupyter lab, loopback, a token) in a scratch project, and Chromium."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.helpers import clean_env, mlflow_servers, wait_for
from tests.launcher.helpers import kill_job
from platform_plugin.util.ports import free_port

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]


class Lab:
    def __init__(self, root: Path, port: int, token: str, proc: subprocess.Popen):
        self.root, self.port, self.token, self.proc = root, port, token, proc
        self.url = f"http://127.0.0.1:{port}"

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/doc/tree/{name}?token={self.token}"  # JupyterLab's simple mode


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab") / "CODE"
    root.mkdir()
    port, token = free_port(), secrets.token_hex(16)
    env = clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{root.parent / 'mlflow.db'}",
                    JUPYTER_CONFIG_DIR=str(root.parent / "jupyter-config"),
                    JUPYTER_RUNTIME_DIR=str(root.parent / "jupyter-runtime"))
    settings = root.parent / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no "get notified about Jupyter news?" popup over the cells
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env["JUPYTERLAB_SETTINGS_DIR"] = str(root.parent / "lab-settings")
    log = open(root.parent / "jupyter.log", "wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("jupyter")), "lab", "--no-browser", "--allow-root",
         "--ip", "127.0.0.1", "--port", str(port), f"--ServerApp.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=", "--ServerApp.open_browser=False"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    lab = Lab(root, port, token, proc)
    try:
        wait_for(lambda: _answers(lab), timeout=120, interval=0.5, what="jupyter lab")
        yield lab
    finally:
        logs = root / "platform_logs"
        for job in logs.iterdir() if logs.is_dir() else []:
            kill_job(str(job))
        os.killpg(proc.pid, signal.SIGTERM)  # the server stops its kernels, the kernels their UI
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        _stop_ui_servers(root.parent)
        log.close()


def _answers(lab: Lab) -> bool:
    if lab.proc.poll() is not None:
        raise AssertionError("jupyter lab exited: see jupyter.log next to the project")
    try:
        return requests.get(f"{lab.url}/api/status", params={"token": lab.token}, timeout=2).ok
    except requests.RequestException:
        return False


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _stop_ui_servers(store_dir: Path) -> None:
    """The MLflow UI a kernel started (its own session, uvicorn's worker in it) if the kernel
    could not stop it."""
    for server in mlflow_servers(store_dir):
        try:
            if server.group == server.pid:  # the session of its own: the worker too
                os.killpg(server.group, signal.SIGKILL)
            else:
                os.kill(server.pid, signal.SIGKILL)
        except OSError:
            pass
