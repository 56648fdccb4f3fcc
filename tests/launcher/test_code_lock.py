"""A running job holds its folders against a cleanup (util/code_lock.py): `platform-run clean`
during a `platform-run launch` / `launch()` / `%dist_run` job is refused with CLEAN_ROOT_BUSY,
two jobs in one CODE/ never block each other, and a job started during a cleanup is refused
before anything exists. Real launches, real cleanups, real flocks."""
from __future__ import annotations

import os
import subprocess
import sys

from platform_plugin.util.code_lock import RootLock, held_folders, lock_path
from tests.helpers import clean_env, wait_for

# a rank that writes what a cleanup removes (an operator cache, a log), then waits for `go`
RANK = ("import os, time\nos.makedirs('kernel_meta', exist_ok=True)\n"
        "open('kernel_meta/op.o', 'w').write('x')\nopen(os.environ['RANK_ID'] + '.log', 'w')\n"
        "open('started.' + os.environ['JOB_ID'], 'w')\n"
        "while not os.path.exists('go'): time.sleep(0.05)\n")


def _cli(*argv: str, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platform_plugin", *argv], cwd=cwd,
                          env=clean_env(), capture_output=True, text=True, timeout=timeout)


def _launch(cwd, job_id: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "platform_plugin", "launch", "--nproc", "1", "--tracking",
         "none", "--backend", "plain", "--job-id", job_id, "--", sys.executable, "rank.py"],
        cwd=cwd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_clean_during_running_jobs_is_refused_and_the_jobs_share_the_folder(tmp_path):
    """Before: only full notebook runs took the lock; a clean during a plain job removed its
    operator cache, its logs and its job folder while the ranks wrote them."""
    project = tmp_path / "CODE" / "exp"
    project.mkdir(parents=True)
    (project / "rank.py").write_text(RANK)
    jobs = [_launch(project, "job-one"), _launch(project, "job-two")]  # together: no blocking
    try:
        wait_for(lambda: all((project / f"started.{j}").exists() for j in ("job-one", "job-two")),
                 timeout=60, what="both jobs' ranks")
        for root in (tmp_path / "CODE", project):  # CODE/ found from the cwd, or --root
            done = _cli("clean", "--root", str(root), cwd=project)
            assert done.returncode == 2, done.stderr
            assert "[CLEAN_ROOT_BUSY]" in done.stderr and "in use by job job-" in done.stderr
        assert (project / "kernel_meta" / "op.o").exists() and (project / "0.log").exists()
        assert (project / "platform_logs" / "job-one").is_dir()
    finally:
        (project / "go").write_text("")
        outputs = [job.communicate(timeout=60) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    done = _cli("clean", cwd=project)  # the jobs ended: their locks went with them
    assert done.returncode == 0, done.stderr
    assert not (project / "kernel_meta").exists() and not (project / "platform_logs").exists()


def test_a_job_started_during_a_cleanup_is_refused_before_anything_exists(tmp_path):
    code = tmp_path / "CODE"
    (code / "exp").mkdir(parents=True)
    (code / "exp" / "rank.py").write_text(RANK)
    cleanup = RootLock(code, "a cleanup").acquire(exclusive=True)  # a real cleanup's lock
    try:
        done = _launch(code / "exp", "job-x")
        out, err = done.communicate(timeout=60)
    finally:
        cleanup.release()
    assert done.returncode == 2, err
    assert "[CLEAN_ROOT_BUSY]" in err and f"{code} is being cleaned by a cleanup (pid" in err
    assert "Traceback" not in err
    assert not (code / "exp" / "platform_logs").exists()
    assert not os.path.exists(lock_path(code))  # the refused job left no lock file behind


def test_the_held_folders_stop_below_the_home_folder_and_one_folder_is_one_lock(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "home" / "CODE" / "exp"
    work.mkdir(parents=True)
    assert held_folders([work, work / "logs" / "job"]) == [
        str(work), str(work.parent), str(work / "logs" / "job"), str(work / "logs")]
    (tmp_path / "link").symlink_to(work)
    assert lock_path(tmp_path / "link") == lock_path(work)  # one folder, one lock
