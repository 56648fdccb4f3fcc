"""The tracking server is checked as soon as a job starts (tracking/job/store_check.py): a
server nobody answers on is said while the ranks run, with what to fix, and the ranks do not
wait for it (their points wait in the spool). Refused credentials and permissions, against the
real team server: tests/tracking/test_server_command.py."""
from __future__ import annotations

import subprocess
import sys

import pytest

from platform_plugin.tracking.job.store_check import store_problem
from tests.helpers import ASSETS, clean_env
from tests.tracking.helpers import refused_url


def test_a_server_nobody_answers_on_is_said_with_what_to_fix():
    with refused_url() as url:
        problem = store_problem(url, "exp", {})
    assert f"the tracking server {url} does not answer (" in problem
    assert "platform-run server" in problem and "MLFLOW_TRACKING_URI" in problem


@pytest.mark.slow
def test_a_job_is_told_while_its_ranks_run_and_they_do_not_wait(tmp_path):
    go = tmp_path / "go"
    with refused_url() as url:
        (tmp_path / ".env").write_text(f"MLFLOW_TRACKING_URI={url}\n")
        job = subprocess.Popen(
            [sys.executable, "-m", "platform_plugin", "launch", "--log-dir", str(tmp_path / "logs"),
             "--tracking", "mlflow", "--nproc", "2", "--backend", "plain", "--show", "all",
             "--no-system-metrics", "--", sys.executable,
             str(ASSETS / "launch" / "server_rank.py"), "until", str(go)],
            cwd=str(tmp_path), env=clean_env(PLATFORM_TRACKING_DRAIN_TIMEOUT="2"),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said = []
        for line in job.stdout:  # the ranks wait for `go`: the job is still running
            said.append(line)
            if "The job goes on" in line:
                break
        go.touch()
        said.extend(job.stdout)
        assert job.wait(timeout=240) == 0, "".join(said)
    out = "".join(said)
    told = next(line for line in said if "The job goes on" in line)
    assert told.startswith("[launcher] tracking: the tracking server ") and "does not answer" in told
    assert "its points wait in " in told and "platform-run sync" in told, told
    assert out.count("ENV {") == 2 and "Traceback" not in out, out
