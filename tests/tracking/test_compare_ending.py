"""compare says above its table how the job ended - succeeded, failed (which rank, which exit),
interrupted, timed out, resumed at attempt K from step S, still running - and marks the ranks
that did not finish (comparison/job_end.py reads the launcher's job.json)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from platform_plugin.comparison.job_end import from_job_folder, from_run_status
from platform_plugin.comparison.table import Point, rank_rows, render
from tests.helpers import ASSETS, clean_env


def _job(tmp_path, result, **more):
    (tmp_path / "job.json").write_text(json.dumps({"result": result, **more}))
    return from_job_folder(tmp_path)


FAILURE = {"name": "1", "rank_id": 1, "exitcode": 3, "signal_name": None}
STOPPED = {"name": "0", "rank_id": 0, "exitcode": -15, "signal_name": "SIGTERM"}


def test_each_ending_is_said_in_words(tmp_path):
    assert _job(tmp_path, {"status": "succeeded"}).headline == "ended: succeeded"
    failed = _job(tmp_path, {"status": "failed", "root_cause": FAILURE,
                             "failures": [FAILURE, STOPPED]})
    assert failed.headline == "ended: failed: rank 1 exit 3"
    assert failed.unfinished == {"1": "exit 3", "0": "SIGTERM"}
    assert _job(tmp_path, {"status": "interrupted", "reason": "interrupted: Ctrl-C"}).headline \
        == "ended: interrupted (interrupted: Ctrl-C)"
    assert _job(tmp_path, {"status": "timeout", "reason": "--timeout 5s reached"}).headline \
        == "ended: timed out (--timeout 5s reached)"
    resumed = _job(tmp_path, {"status": "succeeded"},
                   failed_attempts=[{"attempt": 1, "resumed": {"attempt": 2, "step": 60}}])
    assert resumed.headline == "ended: succeeded; resumed at attempt 2 from step 60"
    restarted = _job(tmp_path, {"status": "succeeded"},
                     failed_attempts=[{"attempt": 1, "resumed": {"attempt": 2, "step": None}}])
    # no platform checkpoint: the script may have resumed from its own snapshot
    assert restarted.headline == ("ended: succeeded; restarted at attempt 2 (no platform "
                                  "checkpoint)")
    running = _job(tmp_path, None, supervisor_pid=os.getpid())
    assert "still running" in running.headline
    assert "killed" in _job(tmp_path, None, supervisor_pid=2 ** 22 + 1).headline
    assert from_job_folder(tmp_path / "nothing") is None
    assert from_run_status("KILLED").headline.startswith("ended: interrupted")


def test_a_rank_that_did_not_finish_is_marked_in_the_table():
    series = {str(r): [Point(s, 1.0 / (s + 1), 1000 * s) for s in range(20 if r else 8)]
              for r in range(2)}
    text = render(rank_rows(series, "loss"), "loss", unfinished={"0": "exit 3"})
    row = next(line for line in text.splitlines() if line.startswith("rank-00"))
    assert "did not finish (exit 3)" in row
    assert "did not finish" not in next(line for line in text.splitlines()
                                        if line.startswith("rank-01"))


@pytest.mark.slow
def test_compare_of_a_failed_job_says_so_above_the_table(tmp_path):
    """A real tracked job whose rank 1 exits 3 (the other stopped by the launcher), then
    `platform-run compare` as a user types it."""
    env = clean_env()
    job = subprocess.run(
        [sys.executable, "-m", "platform_plugin", "launch", "--tracking", "mlflow", "--nproc",
         "2", "--backend", "plain", "--show", "none", "--no-system-metrics", "--", sys.executable,
         str(ASSETS / "launch" / "server_rank.py"), "fail-on", "1"], cwd=str(tmp_path), env=env,
        capture_output=True, text=True, timeout=240)
    assert job.returncode == 1, job.stdout + job.stderr
    done = subprocess.run([sys.executable, "-m", "platform_plugin", "compare"], cwd=str(tmp_path),
                          env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "ended: failed: rank 1 exit 3", done.stdout
    rows = {line.split()[0]: line for line in lines if line.startswith("rank-")}
    assert "did not finish (exit 3)" in rows["rank-01"], done.stdout
    assert "did not finish (SIGTERM)" in rows["rank-00"], done.stdout
