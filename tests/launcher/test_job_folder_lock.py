"""Two launches with one job id into one log folder (a re-run while the first still runs, two
`%dist_run --job-id X` cells): the second is refused (LAUNCH_JOB_RUNNING) before any rank
starts. Before, it ran in the same folder: it overwrote the first job's rank logs and spool,
and its end-of-job sweep (processes by job folder) killed the first job's ranks, which then
failed with SIGTERM. Real launchers, real ranks."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

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


NOBODY = 65534  # another user's uid (root may chown: the suite runs as root, else skipped)


def test_a_job_or_checkpoint_folder_another_user_owns_is_refused_as_a_planted_link_is(tmp_path):
    """A job folder made under a known --job-id by another user (or a link planted there), or a
    --checkpoint-dir another user owns, would be written into and trusted (its spool shipped,
    its checkpoints resumed from): refused with exit 2 before any rank starts, nothing written
    into it, and the job runs once the folder is this user's."""
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder to another user (chown)")
    (tmp_path / "rank.py").write_text("print('ran')\n")
    folder = tmp_path / "logs" / "same"
    folder.mkdir(parents=True)
    os.chown(folder, NOBODY, NOBODY)
    done = _launch(tmp_path)
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 2, out
    assert "[LAUNCH_JOB_DIR_NOT_OWN]" in out and "uid 65534" in out and "Traceback" not in out, out
    assert os.listdir(folder) == [] and "ran" not in out
    folder.rmdir()
    folder.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    done = _launch(tmp_path)
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 2 and "[LAUNCH_JOB_DIR_NOT_OWN]" in out and "is a link" in out, out
    assert os.listdir(tmp_path / "elsewhere") == []
    folder.unlink()
    checkpoints = tmp_path / "shared-checkpoints"
    checkpoints.mkdir()
    os.chown(checkpoints, NOBODY, NOBODY)
    done = _launch(tmp_path, "--checkpoint-dir", str(checkpoints))
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 2, out
    assert "[LAUNCH_CHECKPOINT_DIR_NOT_OWN]" in out and "Traceback" not in out, out
    assert not folder.exists() and os.listdir(checkpoints) == []
    os.chown(checkpoints, os.geteuid(), os.getegid())
    done = _launch(tmp_path, "--checkpoint-dir", str(checkpoints))
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 0, out


def test_a_job_folder_another_user_makes_after_preflight_is_refused_when_the_lock_is_taken(
        tmp_path):
    """Preflight found no job folder; another user made one under the job id before the
    launcher's makedirs, which accepts an existing folder. The folder lock checks the owner
    again: refused before the lock file (or anything else) is written into it."""
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder to another user (chown)")
    from platform_plugin.errors import ConfigError
    from platform_plugin.launcher.processes.spawn import JobDirLock
    from tests.launcher.test_rank_path import plan_for
    plan = plan_for(["python", "train.py"], tmp_path)
    folder = tmp_path / "logs" / "job-1"
    assert plan.job_dir == str(folder) and not folder.exists()  # preflight saw nothing there
    folder.mkdir(parents=True)
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(ConfigError) as refused:
        JobDirLock(plan).__enter__()
    assert "[LAUNCH_JOB_DIR_NOT_OWN]" in str(refused.value) and "uid 65534" in str(refused.value)
    assert os.listdir(folder) == []
