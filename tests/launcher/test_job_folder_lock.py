"""Two launches with one job id into one log folder (a re-run while the first still runs, two
`%dist_run --job-id X` cells): the second is refused (LAUNCH_JOB_RUNNING) before any rank
starts. Before, it ran in the same folder: it overwrote the first job's rank logs and spool,
and its end-of-job sweep (processes by job folder) killed the first job's ranks, which then
failed with SIGTERM. Real launchers, real ranks."""
from __future__ import annotations

import os
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


def test_a_planted_lock_file_in_the_job_folder_is_refused_and_never_followed(tmp_path):
    """Before: the launcher opened `.launcher-<server>.lock` following symlinks, so a symlink
    planted there had its target cut to the launcher's pid; a FIFO there was locked like a
    file and a second launch's refusal read it (ESPIPE: a traceback). Now both are refused
    with LAUNCH_JOB_LOCK before any rank starts, the target untouched."""
    (tmp_path / "rank.py").write_text("print('ran')\n")
    folder = tmp_path / "logs" / "same"
    folder.mkdir(parents=True)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    lock = folder / ".launcher-localhost.lock"
    for plant in (lambda: lock.symlink_to(precious), lambda: os.mkfifo(lock)):
        plant()
        done = _launch(tmp_path)
        out, _ = done.communicate(timeout=60)
        assert done.returncode == 2, out
        assert "[LAUNCH_JOB_LOCK]" in out and str(lock) in out and "Traceback" not in out, out
        assert "ran" not in out and not (folder / "rank_0.log").exists()
        lock.unlink()
    assert precious.read_text() == "keep me"
    assert _launch(tmp_path).wait(timeout=60) == 0  # removed: the job runs
