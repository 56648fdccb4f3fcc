"""CODE/'s lock (folder_locks/protocol.py): busy while held, shared holders together, and the lock
file is removed by its last holder - before, every cleaned folder left one in /tmp (366 after
a few test runs)."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from platform_plugin.folder_locks import cleanup as cleanup_lock
from platform_plugin.folder_locks.cleanup import GatedLock
from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks import protocol
from platform_plugin.folder_locks.protocol import RootLock, lock_path
from tests.helpers import clean_env


def test_the_last_holder_removes_the_lock_file_and_busy_names_the_holder(tmp_path):
    full = RootLock(tmp_path, "a full run of nb.ipynb").acquire(exclusive=True)
    with pytest.raises(ConfigError, match=r"CLEAN_ROOT_BUSY.*a full run of nb.ipynb \(pid"):
        RootLock(tmp_path, "a cleanup").acquire(exclusive=True)
    full.release()
    assert not os.path.exists(lock_path(tmp_path))
    first = RootLock(tmp_path, "run 1").acquire(exclusive=False)
    second = RootLock(tmp_path, "run 2").acquire(exclusive=False)  # shared: together
    with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):
        RootLock(tmp_path, "a cleanup").acquire(exclusive=True)
    first.release()
    assert os.path.exists(lock_path(tmp_path))  # run 2 still holds it
    second.release()
    assert not os.path.exists(lock_path(tmp_path))
    RootLock(tmp_path, "a cleanup").acquire(exclusive=True).release()


# `platform-run clean --root ROOT` with its lock files in LOCKS (not the machine's folder)
CLEAN_WITH_LOCKS_IN = """import sys
from platform_plugin.folder_locks import protocol
protocol.LOCKS_IN = sys.argv[1]
from platform_plugin.cli import main
sys.exit(main(["clean", "--root", sys.argv[2]]))
"""


def _clean(root, locks_in: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """A real `platform-run clean --root ROOT`; `locks_in`: the lock files' folder (default
    the machine's, /tmp)."""
    argv = ([sys.executable, "-m", "platform_plugin", "clean", "--root", str(root)]
            if locks_in is None else [sys.executable, "-c", CLEAN_WITH_LOCKS_IN, locks_in, str(root)])
    return subprocess.run(argv, cwd=root, env=clean_env(**env), capture_output=True, text=True,
                          timeout=120)


def _project(folder):
    """A folder a cleanup accepts, with an operator cache it would remove."""
    (folder / "kernel_meta").mkdir(parents=True)
    (folder / "kernel_meta" / "op.o").write_text("x")
    (folder / "train.py").write_text("print()")
    return folder


def test_no_cleanup_slips_into_a_full_run_turning_its_lock_shared(tmp_path, monkeypatch):
    """A full run cleans CODE/ holding it exclusively, then shares it (GatedLock.share). flock(2)
    does that by removing the exclusive lock, then taking a shared one, and "a pending lock
    request by another process may be granted" in between (the man page; this machine's
    kernel happens to do both under one spinlock, so the instant is made to happen here: the
    conversion is split at its documented seam and a real `platform-run clean` runs in it).
    Before: that cleanup got the lock and removed the files the run's notebook was about to
    use. Now it sees the run's hand-over gate held and refuses. The lock files are this
    test's own: the seam lasts a whole command here, and another test's cleanup sweeping the
    machine's lock folder meanwhile would remove the lock file nobody holds in it."""
    locks = str(tmp_path)  # (the lock folder is made in it)
    monkeypatch.setattr(protocol, "LOCKS_IN", locks)
    monkeypatch.setattr(protocol, "_checked_dir", [])
    code = _project(tmp_path / "CODE")
    full = GatedLock(code, "a full run of nb.ipynb").acquire(exclusive=True)
    seen: list[subprocess.CompletedProcess] = []

    def flock(fd: int, operation: int) -> None:
        if fd == full.fd and operation == fcntl.LOCK_SH:  # the conversion, at its seam
            fcntl.flock(fd, fcntl.LOCK_UN)
            seen.append(_clean(code, locks))
        fcntl.flock(fd, operation)
    try:
        with monkeypatch.context() as seam:
            seam.setattr(cleanup_lock, "fcntl", SimpleNamespace(
                flock=flock, LOCK_EX=fcntl.LOCK_EX, LOCK_SH=fcntl.LOCK_SH,
                LOCK_NB=fcntl.LOCK_NB, LOCK_UN=fcntl.LOCK_UN))
            full.share()
        assert len(seen) == 1
        assert seen[0].returncode == 2, seen[0].stdout + seen[0].stderr
        assert "[CLEAN_ROOT_BUSY]" in seen[0].stderr and "a full run of nb.ipynb" in seen[0].stderr
        assert (code / "kernel_meta" / "op.o").exists()
        with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):  # shared now: still held
            RootLock(code, "a cleanup").acquire(exclusive=True)
        RootLock(code, "a job").acquire(exclusive=False).release()  # and jobs may join it
    finally:
        full.release()
    assert not os.path.exists(lock_path(code)) and not os.path.exists(lock_path(code) + ".gate")
    assert _clean(code, locks).returncode == 0 and not (code / "kernel_meta").exists()


def test_cleanups_of_nested_folders_refuse_each_other_and_cleanups_apart_do_not(tmp_path):
    """Before: a cleanup held only its own root, so `clean --root CODE/exp` ran while CODE/
    was being cleaned (and the other way round): two walks removing the same files. Cleanups
    of folders apart must not refuse each other (their `below` locks above are shared)."""
    code = _project(tmp_path / "CODE")
    exp, other = _project(code / "exp"), _project(code / "other")
    outer = RootLock(code, "a cleanup").acquire(exclusive=True)  # what a cleanup of CODE/ holds
    try:
        inner = _clean(exp)
    finally:
        outer.release()
    assert inner.returncode == 2 and "[CLEAN_ROOT_BUSY]" in inner.stderr, inner.stderr
    assert f"{code} is being cleaned by a cleanup (pid" in inner.stderr, inner.stderr
    assert (exp / "kernel_meta" / "op.o").exists()
    from platform_plugin.folder_locks.cleanup import CleanupLock
    inner_lock = CleanupLock.take(exp)
    try:
        done = _clean(code)
        assert done.returncode == 2 and "[CLEAN_ROOT_BUSY]" in done.stderr, done.stderr
        assert f"a folder in {code} is being cleaned by a cleanup of {exp} (pid" in done.stderr
        apart = _clean(other)
        assert apart.returncode == 0, apart.stderr
    finally:
        inner_lock.release()
    assert not (other / "kernel_meta").exists() and (code / "kernel_meta" / "op.o").exists()
    assert _clean(code).returncode == 0 and not (exp / "kernel_meta").exists()
    assert not [name for name in os.listdir(protocol.lock_dir())
                if name.endswith(tuple(f"-{os.stat(f).st_ino:x}.lock" for f in (code, exp)))]


def test_a_refusal_says_when_the_holder_it_names_has_ended(tmp_path):
    """Every shared holder writes its name into the lock file, so a refusal names the last
    one to start there - which may have ended while others still run (seen: `%platform_clean`
    in a full run named the run's finished `%dist_run` job as if it were running)."""
    run = RootLock(tmp_path, "a full run of nb.ipynb").acquire(exclusive=False)
    holder = ("import os, sys\nfrom platform_plugin.folder_locks.protocol import RootLock\n"
              "RootLock(sys.argv[1], 'job j').acquire(exclusive=False)\nprint(os.getpid())")
    try:
        job = subprocess.run([sys.executable, "-c", holder, str(tmp_path)], env=clean_env(),
                             capture_output=True, text=True, timeout=60)
        assert job.returncode == 0, job.stderr  # it ended holding (no release): name left
        pid = job.stdout.strip()
        with pytest.raises(ConfigError, match=rf"the last to start there: job j \(pid {pid}\), "
                                              r"which has ended since: another one is still "
                                              r"there\)"):
            RootLock(tmp_path, "a cleanup").acquire(exclusive=True)
    finally:
        run.release()


def test_a_job_of_an_earlier_version_still_holds_its_folder_against_a_new_cleanup(tmp_path):
    """A kernel not restarted since `pip install -U` runs the earlier code, which kept the
    lock in $TMPDIR (else /tmp) as platform-run-code-<dev>-<ino>.lock. Before: a new `clean`
    did not look there and removed that job's files. The earlier job's hold is reproduced
    exactly (its file name, its shared flock, its holder line) - the earlier code itself is not
    installed here."""
    code = _project(tmp_path / "CODE")
    (tmp_path / "tmp").mkdir()
    st = os.stat(code)
    name = f"platform-run-code-{st.st_dev:x}-{st.st_ino:x}.lock"
    for folder, env in (("/tmp", {}), (str(tmp_path / "tmp"), {"TMPDIR": str(tmp_path / "tmp")})):
        old = os.open(os.path.join(folder, name), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(old, fcntl.LOCK_SH)
            os.write(old, b"job old-kernel (pid 1)")
            done = _clean(code, **env)
            assert done.returncode == 2 and "[CLEAN_ROOT_BUSY]" in done.stderr, done.stderr
            assert "an earlier platform_plugin (the last to start there: job old-kernel" in \
                done.stderr, done.stderr
            assert (code / "kernel_meta" / "op.o").exists()
        finally:
            os.close(old)
    assert _clean(code).returncode == 0 and not os.path.exists(os.path.join("/tmp", name))


def test_a_cleanup_is_not_refused_by_an_instants_exclusive_hold(tmp_path, monkeypatch):
    """A cleanup's sweep (and an ending job's last-holder check) holds a lock file exclusively
    for an instant. Before: a cleanup of that folder arriving in that instant was refused
    CLEAN_ROOT_BUSY (exclusive requests did not retry) - now by another cleanup's sweep of an
    unrelated folder too. The instant is made deterministic: the sweep's hold ends (it removes
    the file nobody held, as it does) during the cleanup's first retry pause."""
    path = lock_path(tmp_path)
    sweeping = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(sweeping, fcntl.LOCK_EX)
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 1:
            os.unlink(path)
            os.close(sweeping)
    monkeypatch.setattr(protocol, "time", SimpleNamespace(sleep=pause))
    from platform_plugin.folder_locks.cleanup import CleanupLock
    CleanupLock.take(tmp_path).release()
    assert pauses[:1] == [protocol.BUSY_WAIT_S]
