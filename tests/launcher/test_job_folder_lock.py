"""Two launches with one job id into one log folder (a re-run while the first still runs, two
`%dist_run --job-id X` cells): the second is refused (LAUNCH_JOB_RUNNING) before any rank
starts. Before, it ran in the same folder: it overwrote the first job's rank logs and spool,
and its end-of-job sweep (processes by job folder) killed the first job's ranks, which then
failed with SIGTERM. Real launchers, real ranks."""
from __future__ import annotations

import subprocess
import sys

from tests.helpers import clean_env, wait_for

RANK = ("import os, time\nprint('first job rank', flush=True)\nopen('started', 'w')\n"
        "while not os.path.exists('go'): time.sleep(0.05)\n")


def _launch(tmp_path, *extra: str, log_dir: str = "logs") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "platform_plugin", "launch", "--nproc", "1", "--tracking",
         "none", "--backend", "plain", "--job-id", "same", "--log-dir", log_dir, *extra, "--",
         sys.executable, "rank.py"], cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def test_a_second_launch_of_a_running_job_id_into_its_folder_is_refused(tmp_path):
    (tmp_path / "rank.py").write_text(RANK)
    first = _launch(tmp_path)
    try:
        wait_for(lambda: (tmp_path / "started").exists(), timeout=60, what="the first job's rank")
        second = _launch(tmp_path)
        out, _ = second.communicate(timeout=60)
        assert second.returncode == 2, out
        assert "[LAUNCH_JOB_RUNNING]" in out and f"launcher pid {first.pid}" in out, out
        assert "Traceback" not in out
        # another log folder is another job folder: the same id runs there
        other = _launch(tmp_path, log_dir="other")
        (tmp_path / "go").write_text("")
        assert other.wait(timeout=60) == 0
    finally:
        (tmp_path / "go").write_text("")
        out, _ = first.communicate(timeout=60)
    assert first.returncode == 0, out  # not stopped by the second launcher's sweep
    assert "first job rank" in (tmp_path / "logs" / "same" / "rank_0.log").read_text()
    again = _launch(tmp_path)  # it ended: its id can be launched again
    assert again.wait(timeout=60) == 0
