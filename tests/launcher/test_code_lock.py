"""A running job holds its folders against a cleanup (folder_locks/protocol.py): `platform-run
clean` during a `platform-run launch` / `launch()` / `%dist_run` job is refused with CLEAN_ROOT_BUSY,
two jobs in one CODE/ never block each other, and a job started during a cleanup is refused
before anything exists. Real launches, real cleanups, real flocks."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks import protocol
from platform_plugin.folder_locks.protocol import RootLock, held_folders, lock_path
from tests.helpers import clean_env, needs_unshare, on_a_full_tmpfs, wait_for

# a rank that writes what a cleanup removes (an operator cache, a log), then waits for `go`
RANK = ("import os, time\nos.makedirs('kernel_meta', exist_ok=True)\n"
        "open('kernel_meta/op.o', 'w').write('x')\nopen(os.environ['RANK_ID'] + '.log', 'w')\n"
        "open('started.' + os.environ['JOB_ID'], 'w')\n"
        "while not os.path.exists('go'): time.sleep(0.05)\n")


def _cli(*argv: str, cwd, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platform_plugin", *argv], cwd=cwd,
                          env=clean_env(**env), capture_output=True, text=True, timeout=timeout)


def _launch(cwd, job_id: str, rank: str = "rank.py", **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "platform_plugin", "launch", "--nproc", "1", "--tracking",
         "none", "--backend", "plain", "--job-id", job_id, "--", sys.executable, rank],
        cwd=cwd, env=clean_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def _running(project, job_id: str, rank: str = "rank.py", **env: str) -> subprocess.Popen:
    """A job whose rank has started (it waits for `go` in `project`)."""
    job = _launch(project, job_id, rank, **env)
    wait_for(lambda: (project / f"started.{job_id}").exists() or job.poll() is not None,
             timeout=60, what="the job's rank")
    assert job.poll() is None, job.communicate()
    return job


def _ended(job: subprocess.Popen, project) -> None:
    (project / "go").write_text("")
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, out + err


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
            assert "[CLEAN_ROOT_BUSY]" in done.stderr, done.stderr
            # several jobs rewrite the name: the message names the last to start, no more
            assert "(the last to start there: job job-" in done.stderr, done.stderr
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


def test_a_job_starting_while_another_one_ends_is_not_refused(tmp_path, monkeypatch):
    """An ending job takes its lock exclusively for an instant (release(): is it the last
    holder?). A job starting in that instant was refused CLEAN_ROOT_BUSY ("being cleaned by
    job ...") although only jobs held the folder. The instant is made deterministic: the ending
    job releases (and so removes the file) during the starting job's first retry pause."""
    ending = RootLock(tmp_path, "job ending").acquire(exclusive=False)
    fcntl.flock(ending.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first step of its release()
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        ending.release()
    monkeypatch.setattr(protocol, "time", SimpleNamespace(sleep=pause))
    starting = RootLock(tmp_path, "job starting").acquire(exclusive=False)
    assert pauses == [protocol.BUSY_WAIT_S] and starting.fd >= 0
    with pytest.raises(ConfigError, match=r"CLEAN_ROOT_BUSY.*in use by a job, a notebook run or "
                                          r"a cleanup \(the last to start there: job starting"):
        RootLock(tmp_path, "a cleanup").acquire(exclusive=True)  # it holds the file it opened
    starting.release()
    assert not os.path.exists(lock_path(tmp_path))


HOLD_WITH_A_FULL_LOCK_FOLDER = """
project = sys.argv[2]
from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks.protocol import JobHold, RootLock
hold = JobHold.take([project], "job full")
try:
    RootLock(project, "a cleanup").acquire(exclusive=True)
except ConfigError as exc:
    print("refused:", exc)
hold.release()
RootLock(project, "a cleanup").acquire(exclusive=True).release()
print("free")
"""


@needs_unshare
def test_a_full_lock_folder_neither_fails_the_job_nor_leaks_its_lock(tmp_path):
    """Before: writing the holder's name raised ENOSPC out of launch() (a traceback) with the
    flock still held by the open descriptor (every later cleanup refused until a restart)."""
    project = tmp_path / "project"
    project.mkdir()
    done = on_a_full_tmpfs(Path(protocol.lock_dir()), HOLD_WITH_A_FULL_LOCK_FOLDER, str(project))
    assert done.returncode == 0, done.stderr
    assert "refused: [CLEAN_ROOT_BUSY]" in done.stdout, done.stdout  # held while the job ran
    assert done.stdout.endswith("free\n"), done.stdout  # and free once it ended


def test_a_terminal_and_a_kernel_with_different_temporary_folders_see_each_others_locks(
        tmp_path):
    """Before: the lock files lived in $TMPDIR: a job started from a kernel with one and a
    `clean` from a terminal with another saw two different files, and the clean removed the
    running job's operator cache and logs."""
    project = tmp_path / "CODE" / "exp"
    project.mkdir(parents=True)
    (project / "rank.py").write_text(RANK)
    (tmp_path / "kernel_tmp").mkdir()
    (tmp_path / "terminal_tmp").mkdir()
    job = _running(project, "job-k", TMPDIR=str(tmp_path / "kernel_tmp"))
    try:
        done = _cli("clean", cwd=project, TMPDIR=str(tmp_path / "terminal_tmp"))
        assert done.returncode == 2 and "[CLEAN_ROOT_BUSY]" in done.stderr, done.stderr
        assert (project / "kernel_meta" / "op.o").exists()
    finally:
        _ended(job, project)
    assert os.listdir(tmp_path / "kernel_tmp") == os.listdir(tmp_path / "terminal_tmp") == []


def test_the_tree_below_a_running_jobs_working_folder_belongs_to_the_job(tmp_path):
    """Before: a job held its working folder and the folders above it, so a cleanup of a
    folder BELOW its working folder (`clean --root exp/sub`) went ahead and removed what the
    job writes there (a rank may write anywhere under its cwd). Now the job claims its tree:
    such a cleanup refuses, and a job refuses to start while a cleanup works below its
    folder - before anything exists. Cleanups of the folder next to it are not disturbed."""
    project = tmp_path / "CODE" / "exp"
    sub, beside = project / "sub", tmp_path / "CODE" / "other"
    for folder in (sub, beside):
        (folder / "kernel_meta").mkdir(parents=True)
        (folder / "kernel_meta" / "op.o").write_text("x")
        (folder / "train.py").write_text("print()")
    (project / "rank.py").write_text(RANK)
    job = _running(project, "job-t")
    try:
        done = _cli("clean", "--root", str(sub), cwd=sub)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "[CLEAN_ROOT_BUSY]" in done.stderr and f"files in {project}, the working folder " \
            "of a running job or notebook run (the last to start there: job job-t (pid" \
            in done.stderr, done.stderr
        assert (sub / "kernel_meta" / "op.o").exists()
        assert _cli("clean", "--root", str(beside), cwd=beside).returncode == 0
    finally:
        _ended(job, project)
    from platform_plugin.folder_locks.cleanup import CleanupLock
    below = CleanupLock.take(sub)  # a real cleanup's locks, while its walk would run
    try:
        refused = _launch(project, "job-u")
        out, err = refused.communicate(timeout=60)
    finally:
        below.release()
    assert refused.returncode == 2 and "[CLEAN_ROOT_BUSY]" in err, err
    assert f"a folder in {project} is being cleaned by a cleanup of {sub} (pid" in err, err
    assert not (project / "platform_logs" / "job-u").exists() and "Traceback" not in err


# a rank that writes what a cleanup removes and checks, a moment later, that it is still there
CHECKING_RANK = ("import os, sys, time\nos.makedirs('kernel_meta', exist_ok=True)\n"
                 "open('kernel_meta/op.o', 'w').write('x')\ntime.sleep(0.3)\n"
                 "sys.exit(0 if os.path.exists('kernel_meta/op.o') else 3)\n")


@pytest.mark.slow
def test_cleans_racing_a_launch_never_remove_what_its_rank_writes(tmp_path):
    """Round after round, a launch and three cleans (twice CODE/, once the job's own folder)
    start together: whichever gets there first, the others refuse (exit 2, CLEAN_ROOT_BUSY) or run
    before or after it - never a clean while the rank writes (its check would exit 3)."""
    code = tmp_path / "CODE"
    project = code / "exp"
    project.mkdir(parents=True)
    (project / "check.py").write_text(CHECKING_RANK)
    outcomes = set()
    for round_ in range(8):
        job = _launch(project, f"race-{round_}", "check.py")
        cleans = [subprocess.Popen([sys.executable, "-m", "platform_plugin", "clean", "--root",
                                    str(root)], cwd=project, env=clean_env(), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                  for root in (code, project, code)]  # (two of the same root)
        out, err = job.communicate(timeout=120)
        assert job.returncode in (0, 2), out + err  # 1: the rank's cache was removed
        results = [(*clean.communicate(timeout=120), clean.returncode) for clean in cleans]
        results = [(rc, o, e) for o, e, rc in results]
        for returncode, clean_out, clean_err in [(job.returncode, out, err), *results]:
            assert returncode in (0, 2) and "Traceback" not in clean_err, clean_err
            assert returncode == 0 or "[CLEAN_ROOT_BUSY]" in clean_err, clean_err
        outcomes.add((job.returncode, *(r[0] for r in results)))
    assert any(2 in outcome for outcome in outcomes), outcomes  # they did overlap
    assert not [n for n in os.listdir(protocol.lock_dir()) if n.endswith(
        (f"-{os.stat(code).st_ino:x}.lock", f"-{os.stat(project).st_ino:x}.lock"))]
