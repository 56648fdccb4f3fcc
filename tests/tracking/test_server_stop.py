"""Stopping a local MLflow server (`platform-run ui`, `platform-run server`, `%dist_compare`'s UI):
the server gets its graceful stop, the command does not wait for the `mlflow` CLI process's
own interpreter teardown after it, and nothing is left.

The tests use a stand-in for the `mlflow server` CLI process: a leader that runs its
server as a child, forwards SIGTERM to it as MLflow's `_run_server` does, and then has a long
teardown (MLflow's is the final garbage collection of everything `import mlflow` made, 3.6-4.2 s
here, too short to tell apart from a cut one without a clock). The real command's stop:
tests/notebook/test_jupyter_ui.py.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from platform_plugin.tracking.server.local import stop_server
from platform_plugin.util.procfs import alive
from tests.helpers import process_tree, wait_for

# The server writes that it was stopped gracefully (SIGTERM, not SIGKILL), as uvicorn logs
# "Finished server process"; the leader forwards SIGTERM to it (its handler is set before the
# server says "serving"), waits for it, then has its teardown.
SERVER = ("import signal, sys, time\n"
          "def stop(signum, frame):\n"
          "    open(sys.argv[1], 'w').write('stopped by SIGTERM')\n"
          "    sys.exit(0)\n"
          "signal.signal(signal.SIGTERM, stop)\n"
          "print('serving', flush=True)\n"
          "time.sleep(600)\n")
LEADER = f"""import signal, subprocess, sys, time
server = subprocess.Popen([sys.executable, "-c", {SERVER!r}, sys.argv[1]])
signal.signal(signal.SIGTERM, lambda signum, frame: server.send_signal(signum))
server.wait()
time.sleep(120)  # the teardown
"""

IN_PROCESS = """import signal, sys, time
def stop(signum, frame):
    time.sleep(1)  # a graceful shutdown of its own
    open(sys.argv[1], "w").write("shut down")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("serving", flush=True)
time.sleep(600)
"""


def _start(code: str, status: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, str(status)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "serving"
    return proc


def test_the_leaders_teardown_is_cut_once_its_server_has_stopped(tmp_path):
    status = tmp_path / "server-status"
    proc = _start(LEADER, status)
    tree = wait_for(lambda: (lambda t: t if len(t) == 2 else None)(process_tree(proc.pid)),
                    timeout=30, what="the stand-in's server process")
    try:
        stop_server(proc, grace=300)  # before: waited out the 120 s teardown, then exit code 0
        assert status.read_text() == "stopped by SIGTERM"  # the server's own graceful stop
        assert proc.returncode == -signal.SIGKILL  # the teardown after it was cut
        assert not any(alive(pid) for pid in tree)
    finally:
        for pid in tree:  # a failing test leaves nothing behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_server_without_children_gets_its_grace_for_its_own_shutdown(tmp_path):
    status = tmp_path / "server-status"
    proc = _start(IN_PROCESS, status)
    try:
        stop_server(proc, grace=60)
        assert status.read_text() == "shut down"
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
