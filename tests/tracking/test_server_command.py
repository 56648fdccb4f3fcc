"""`platform-run server` as a user runs it: a real PostgreSQL cluster and a real `mlflow server`,
started by the command, both gone when the command is gone - SIGKILLed included - and the
cluster shut down cleanly either way (it starts again on the same folder without recovery)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import requests

from platform_plugin.util.procfs import alive
from tests.helpers import clean_env, process_tree, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir():
    from platform_plugin.tracking.server.postgres import missing_reason
    why = missing_reason()
    if why:
        pytest.skip(why)
    root = tempfile.mkdtemp(prefix="platform-server-")  # /tmp: the postgres user can reach it
    os.chmod(root, 0o755)
    yield Path(root) / "data"
    subprocess.run(["pkill", "-KILL", "-f", root])  # what a failed test left (postgres -D, mlflow)
    shutil.rmtree(root, ignore_errors=True)


class ServerCommand:
    """`platform-run server` in a session of its own; `url` once it printed its URI line."""

    def __init__(self, data: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "platform_plugin", "server", "--port", "0", "--workers", "1",
             "--data-dir", str(data)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=clean_env(), start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        line = wait_for(self._uri_line, timeout=240, interval=0.2, what="the MLFLOW_TRACKING_URI line")
        self.url = line.split("=", 1)[1].strip()
        self.tree = process_tree(self.proc.pid)  # the command, MLflow and its workers
        self.postmaster = int((data / "pgdata" / "postmaster.pid").read_text().split()[0])

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def _uri_line(self):
        if self.proc.poll() is not None:
            raise AssertionError("platform-run server ended early:\n" + "".join(self.lines))
        return next((x for x in self.lines if x.startswith("MLFLOW_TRACKING_URI=")), None)

    def all_gone(self) -> bool:
        return not any(alive(pid) for pid in [*self.tree, self.postmaster])


def _log_since(path: Path, offset: int) -> str:
    return path.read_text(errors="replace")[offset:]


def test_sigkilled_server_command_takes_mlflow_and_postgres_down_cleanly(data_dir):
    first = ServerCommand(data_dir)
    assert requests.get(f"{first.url}/health", timeout=10).ok
    assert len(first.tree) >= 2, first.tree  # the command and MLflow's server at least
    pg_log = data_dir / "postgres.log"
    before_kill = len(pg_log.read_text(errors="replace"))

    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    wait_for(first.all_gone, timeout=60, what="MLflow and PostgreSQL stopped after the SIGKILL")
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()
    stopped = _log_since(pg_log, before_kill)
    assert "received smart shutdown request" in stopped and "database system is shut down" in stopped, stopped
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{first.url}/health", timeout=5)

    # the same folder starts again, from a clean shutdown (no crash recovery), and SIGTERM stops it
    before_start = len(pg_log.read_text(errors="replace"))
    second = ServerCommand(data_dir)
    started = _log_since(pg_log, before_start)
    assert "database system was shut down at" in started and "not properly shut down" not in started, started
    assert requests.get(f"{second.url}/health", timeout=10).ok
    os.kill(second.proc.pid, signal.SIGTERM)
    assert second.proc.wait(timeout=60) == 0, "".join(second.lines)
    wait_for(second.all_gone, timeout=30, what="everything stopped after SIGTERM")


def test_a_second_server_on_the_same_data_dir_is_refused_and_the_first_keeps_serving(data_dir):
    """Before: the second `platform-run server --data-dir SAME` failed to start PostgreSQL
    ("another server might be running", exit 1) and its clean-up stopped the FIRST server's
    cluster: the first MLflow still answered /health but every store request failed."""
    first = ServerCommand(data_dir)
    second = subprocess.run(
        [sys.executable, "-m", "platform_plugin", "server", "--port", "0", "--workers", "1",
         "--data-dir", str(data_dir)], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert second.returncode == 2, second.stderr
    assert "[SERVER_DATA_DIR_BUSY]" in second.stderr and f"pid {first.proc.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    created = requests.post(f"{first.url}/api/2.0/mlflow/experiments/create",
                            json={"name": "still-served"}, timeout=30)
    assert created.ok, created.text  # the first server's database is still there
    os.kill(first.proc.pid, signal.SIGTERM)
    assert first.proc.wait(timeout=60) == 0, "".join(first.lines)
    wait_for(first.all_gone, timeout=30, what="everything stopped after SIGTERM")
