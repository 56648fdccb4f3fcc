"""The MLflow UI a notebook (or `platform-run ui`) starts lives exactly as long as its owner:
a SIGKILLed kernel or CLI (no atexit runs) takes the whole server tree with it, uvicorn's
worker included, through the lifeline the ranks have. Real kernel, real `mlflow server`."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

from platform_plugin.util.procfs import alive
from tests.helpers import clean_env, process_tree, wait_for

pytestmark = pytest.mark.slow


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _server_tree(owner: int) -> list[int]:
    """The owner's descendants once the MLflow server and its web worker run (the lifeline's
    `sh` included: it must go too)."""
    def ready():
        tree = process_tree(owner)[1:]
        servers = [pid for pid in tree if "mlflow" in _cmdline(pid) and " server " in _cmdline(pid)]
        return tree if servers and len(process_tree(servers[0])) >= 2 else None
    return wait_for(ready, timeout=120, what="the MLflow server and its worker")


def _kill_and_wait_gone(owner: int, tree: list[int]) -> None:
    os.kill(owner, signal.SIGKILL)
    try:
        wait_for(lambda: not any(alive(pid) for pid in tree), timeout=30,
                 what=f"the UI server tree {tree} to end after its owner's SIGKILL")
    finally:
        for pid in tree:  # a failing test leaves nothing behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_ui_a_kernel_started_ends_when_the_kernel_is_sigkilled(tmp_path):
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path), env=clean_env())
    outputs: list[str] = []
    try:
        reply = kc.execute_interactive(
            "import os\nfrom platform_plugin.comparison.jupyter_ui import ensure_ui\n"
            f"port = ensure_ui('sqlite:///{tmp_path / 'mlflow.db'}')\nprint(os.getpid(), port)",
            timeout=180, output_hook=lambda msg: outputs.append(msg["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", outputs
        kernel_pid, port = map(int, "".join(outputs).split())
        tree = _server_tree(kernel_pid)
        assert any(f"--port {port}" in _cmdline(pid) for pid in tree)
        _kill_and_wait_gone(kernel_pid, tree)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_the_ui_platform_run_ui_started_ends_with_the_command(tmp_path):
    """Decision: `platform-run ui` is a foreground command whose server is its own ("Ctrl-C
    stops it"); a SIGKILLed (or hung-up) command must not leave a server holding the port."""
    proc, _first = _platform_run_ui(tmp_path)
    try:
        _kill_and_wait_gone(proc.pid, _server_tree(proc.pid))
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_on_platform_run_ui_stops_the_server_gracefully_and_exits_0(tmp_path):
    """Ctrl-C's way (SIGTERM here) with the real MLflow: exit 0 (the `mlflow` CLI process is
    SIGKILLed once its server has ended, tracking/server/local.py: that is no failure), uvicorn
    finished its own shutdown, and no process of the tree is left."""
    proc, first = _platform_run_ui(tmp_path)
    try:
        log = Path(first.split("server log ")[1].split(";")[0])
        tree = _server_tree(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, proc.stdout.read()
        served = log.read_text(errors="replace")
        assert "Finished server process" in served, served[-3000:]  # not cut by SIGKILL
        assert not [pid for pid in tree if alive(pid)], tree
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _platform_run_ui(tmp_path) -> tuple[subprocess.Popen, str]:
    """`platform-run ui` on a fresh store, once it printed the UI's link (the server is up).
    It says it is starting first, naming the address and the store: the server's start takes
    seconds (a minute on a loaded machine), and the command printed nothing meanwhile."""
    cli = Path(sys.executable).with_name("platform-run")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.Popen([str(cli), "ui", "--port", "0", "--store", store,
                             "--log-dir", str(tmp_path / "logs")], cwd=tmp_path, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    starting, up = proc.stdout.readline(), proc.stdout.readline()
    address = (starting.split(" on ", 1) + [""])[1].split(" ")[0]
    if not (starting.startswith("starting the MLflow UI on http://127.0.0.1:")
            and f"(store {store})" in starting
            and up.startswith(f"MLflow UI: {address}  (store {store}")):
        proc.kill()
        proc.wait()
        raise AssertionError(starting + up)
    return proc, up


def test_the_ui_server_opens_its_store_only_under_the_writers_lock(tmp_path):
    """`mlflow server` creates and migrates a fresh sqlite store as it starts; a job's writer
    opening the same fresh store then corrupts it ("table ... already exists"). The UI's server
    starts only once it holds the store's lock (the writers' lock), and holds it until it
    answers."""
    import fcntl
    import threading

    from platform_plugin.comparison.jupyter_ui import OwnedUI
    from platform_plugin.tracking.sinks.mlflow_sink import store_lock
    from platform_plugin.util.ports import free_port

    store, db = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "mlflow.db"
    made: list[OwnedUI] = []
    with store_lock(store):  # a writer opening the fresh store
        opening = threading.Thread(target=lambda: made.append(
            OwnedUI(store, free_port(), str(tmp_path / "ui.log"))))
        opening.start()
        opening.join(3)
        waited = opening.is_alive() and not db.exists()  # no server yet: nothing opened the store
    opening.join(60)
    ui = made[0]
    try:
        assert waited
        ui.wait_healthy()
        assert db.exists()
        lock = os.open(f"{db}.lock", os.O_RDWR)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released once the server answers
        finally:
            os.close(lock)
    finally:
        ui.stop()
