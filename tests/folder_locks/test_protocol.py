"""A hostile pass over the folder locks (folder_locks/protocol.py, folder_locks/cleanup.py): a
holder killed with SIGKILL at every lock system call, lock files replaced by a symlink or a FIFO, a lock
folder that is read-only, planted or removed, folders reached through symlinks and other
mounts. Real processes, real flocks, real mounts (in a private mount namespace)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from platform_plugin.folder_locks.cleanup import CleanupLock
from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks import protocol
from platform_plugin.folder_locks.protocol import JobHold, RootLock, lock_path
from tests.helpers import clean_env, needs_unshare

# A job's hold and release, then a full run's cleanup lock, its hand-over and release; the
# process SIGKILLs itself just after its N-th lock system call (every state between two calls).
KILLED_AT = """
import os, signal, sys
from platform_plugin.folder_locks.cleanup import CleanupLock
from platform_plugin.folder_locks import protocol
from platform_plugin.folder_locks.protocol import JobHold
code, exp, n, protocol.LOCKS_IN = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
CALLS = {"flock", "open", "unlink", "close", "mkdir", "ftruncate", "pwrite", "pread"}
seen = 0
def count(frame, event, arg):
    global seen
    if event == "c_return" and getattr(arg, "__name__", "") in CALLS:
        seen += 1
        if seen == n:
            os.kill(os.getpid(), signal.SIGKILL)
sys.setprofile(count)
JobHold.take([exp], "job killed").release()
lock = CleanupLock.take(code, "a full run killed")
lock.share()
lock.release()
sys.setprofile(None)
print("done", seen)
"""


def _project(folder):
    (folder / "kernel_meta").mkdir(parents=True)
    (folder / "kernel_meta" / "op.o").write_text("x")
    (folder / "train.py").write_text("print()")
    return folder


def _clean(root, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platform_plugin", "clean", "--root", str(root)],
                          cwd=root, env=clean_env(**env), capture_output=True, text=True,
                          timeout=120)


def _our_lock_files(*folders) -> list[str]:
    names = tuple(f"-{os.stat(f).st_dev:x}-{os.stat(f).st_ino:x}.lock" for f in folders)
    return [n for n in os.listdir(protocol.lock_dir()) if n.endswith(names) or
            n.endswith(tuple(name + ".gate" for name in names))]


def test_a_holder_killed_at_any_lock_call_leaves_nothing_held(tmp_path, monkeypatch):
    """kill -9 after every open/flock/unlink/close/write of a job's hold and a full run's
    cleanup lock and hand-over: the next cleanup is never refused by a dead holder, a
    live job still refuses it, and what a dead holder left (a file, a gate) is removed by the
    next holders."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the folders above stop here: fewer calls
    monkeypatch.setattr(protocol, "LOCKS_IN", str(tmp_path))  # only this test's files (the
    monkeypatch.setattr(protocol, "_checked_dir", [])  # sweep's calls: one per file there)
    monkeypatch.setattr(protocol, "BUSY_WAIT_S", 0.001)  # (this side's refusals: not tested)
    code = _project(tmp_path / "CODE")
    exp = _project(code / "exp")
    points = 0
    while True:
        points += 1
        child = subprocess.run([sys.executable, "-c", KILLED_AT, str(code), str(exp),
                                str(points), str(tmp_path)], env=clean_env(HOME=str(tmp_path)),
                               capture_output=True, text=True, timeout=60)
        if child.stdout.startswith("done"):
            break
        assert child.returncode == -9, child.stderr
        CleanupLock.take(code).release()  # no stale lock
        with JobHold.take([exp], "a live job"):
            for root in (code, exp):
                with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):
                    CleanupLock.take(root)
    assert points > 30, child.stdout  # every call of the sequence was a kill point
    with JobHold.take([exp], "a live job"):
        pass
    CleanupLock.take(code).release()
    assert _our_lock_files(code, exp) == []


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_lock_file_replaced_under_a_running_job_makes_cleanups_refuse(tmp_path, planted):
    """Before: the lock file of a folder a job held, replaced by a symlink (opened O_NOFOLLOW:
    ELOOP) or a FIFO (locked like a file: nobody held the new one), let `clean` go ahead
    without any lock and remove the job's files. Now a cleanup that cannot use the lock file
    refuses with CLEAN_LOCK_UNAVAILABLE naming it; a job goes on without it."""
    exp = _project(tmp_path / "exp")
    hold = JobHold.take([exp], "job j")
    try:
        path = lock_path(exp)
        os.unlink(path)
        if planted == "symlink":
            os.symlink(tmp_path / "elsewhere", path)
        else:
            os.mkfifo(path)
        done = _clean(exp)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "[CLEAN_LOCK_UNAVAILABLE]" in done.stderr and path in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and (exp / "kernel_meta" / "op.o").exists()
        JobHold.take([exp], "another job").release()  # jobs go on
    finally:
        hold.release()
        os.unlink(path)
    assert _clean(exp).returncode == 0


def test_a_lock_folder_that_is_not_this_users_private_folder(tmp_path, monkeypatch):
    """A symlink planted where the lock folder goes, or another user's folder there: a cleanup
    refuses (CLEAN_LOCK_UNAVAILABLE), a job goes on. A lock folder removed while in use (a /tmp
    cleaner) is made anew; one left open to others is made private again."""
    exp = _project(tmp_path / "exp")
    monkeypatch.setattr(protocol, "LOCKS_IN", str(tmp_path))
    folder = tmp_path / f"platform-run-locks-{os.getuid()}"
    plants = [lambda: folder.symlink_to(tmp_path / "exp")]
    if os.geteuid() == 0:  # (only root can give a folder to another user)
        plants.append(lambda: (folder.mkdir(), os.chown(folder, os.getuid() + 4242, -1)))
    for plant in plants:
        monkeypatch.setattr(protocol, "_checked_dir", [])
        plant()
        with pytest.raises(ConfigError, match=r"CLEAN_LOCK_UNAVAILABLE.*is not a folder of "
                                              r"this user"):
            CleanupLock.take(exp)
        JobHold.take([exp], "a job").release()
        os.unlink(folder) if folder.is_symlink() else os.rmdir(folder)
    monkeypatch.setattr(protocol, "_checked_dir", [])
    hold = JobHold.take([exp], "a job")
    os.chmod(folder, 0o777)
    for name in os.listdir(folder):
        os.unlink(folder / name)
    os.rmdir(folder)
    try:
        RootLock(tmp_path, "a job").acquire(exclusive=False).release()  # made anew
        monkeypatch.setattr(protocol, "_checked_dir", [])
        os.chmod(folder, 0o777)
        CleanupLock.take(tmp_path / "exp" / "kernel_meta").release()
        assert folder.stat().st_mode & 0o777 == 0o700
    finally:
        hold.release()


READ_ONLY = """
import sys
from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks.cleanup import CleanupLock
from platform_plugin.folder_locks.protocol import JobHold
hold = JobHold.take([sys.argv[1]], "a job")
print("job goes on")
try:
    CleanupLock.take(sys.argv[1])
except ConfigError as exc:
    print("refused:", exc)
"""


@needs_unshare
def test_a_read_only_lock_folder_makes_cleanups_refuse_clearly(tmp_path):
    """Before: a lock file that could not be created (read-only temporary folder) was taken as
    "cannot coordinate": the cleanup went ahead, blind to every job."""
    exp = _project(tmp_path / "exp")
    folder = protocol.lock_dir()
    script = (f"mount -t tmpfs -o ro,mode=700 tmpfs {folder} && "
              f"{sys.executable} -c '{READ_ONLY}' {exp}")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("job goes on\nrefused: [CLEAN_LOCK_UNAVAILABLE]"), done.stdout
    assert "Read-only file system" in done.stdout, done.stdout


MOUNTS = """
import os, sys
from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks.cleanup import CleanupLock
from platform_plugin.folder_locks.protocol import JobHold
real, bind, mnt = sys.argv[1:4]
for job_in, clean in ((bind, real), (real + "/exp", bind), (mnt + "/exp", mnt),
                      (mnt + "/exp", os.path.dirname(mnt))):
    with JobHold.take([job_in], "job"):
        try:
            CleanupLock.take(clean).release()
            print("cleaned", clean)
        except ConfigError as exc:
            print("refused", exc.problems[0].code)
"""


@needs_unshare
def test_folders_on_other_mounts_and_bind_mounts_are_one_lock(tmp_path):
    """A folder seen through a bind mount is the same folder (device and inode); a job on a
    tmpfs mounted inside a project holds it against cleanups of the tmpfs and of the project
    around it."""
    real, bind, mnt = tmp_path / "real", tmp_path / "bind", tmp_path / "project" / "mnt"
    for folder in (real / "exp", bind, mnt):
        folder.mkdir(parents=True)
    script = (f"mount --bind {real} {bind} && mount -t tmpfs tmpfs {mnt} && mkdir {mnt}/exp && "
              f"{sys.executable} -c '{MOUNTS}' {real} {bind} {mnt}")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["refused CLEAN_ROOT_BUSY"] * 4, done.stdout


def test_a_job_in_a_folder_reached_through_a_symlink_claims_the_real_tree(tmp_path):
    """The locks are named after the real folder: a job whose working folder is a symlink
    holds the target's tree and the folders above the target."""
    real = _project(tmp_path / "data" / "exp")
    (tmp_path / "link").symlink_to(real)
    sub = _project(real / "sub")
    with JobHold.take([tmp_path / "link"], "job via link"):
        for root in (sub, real, real.parent):
            with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):
                CleanupLock.take(root)
    CleanupLock.take(sub).release()


@pytest.mark.parametrize("planted", ["symlink", "fifo", "left by a killed run"])
def test_junk_where_a_hand_over_gate_goes_is_removed_not_obeyed(tmp_path, planted):
    """Only a process holding a folder's lock exclusively touches its gate, so anything there
    that a full run does not hold is junk: cleanups and hand-overs remove it and go on (a
    planted symlink or FIFO made every cleanup of the folder refuse)."""
    code = _project(tmp_path / "CODE")
    gate = lock_path(code) + ".gate"
    def plant() -> None:
        if planted == "symlink":
            os.symlink(tmp_path / "CODE" / "train.py", gate)
        elif planted == "fifo":
            os.mkfifo(gate)
        else:
            open(gate, "w").close()
    for user in ("a cleanup", "a full run's hand-over"):
        if user == "a cleanup":
            plant()
        lock = CleanupLock.take(code)
        if user == "a full run's hand-over":
            plant()  # after the cleanup's check, before the hand-over
            lock.share()
            with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):
                CleanupLock.take(code)
        lock.release()
        assert not os.path.lexists(gate) and (code / "train.py").read_text() == "print()"


def test_a_job_working_in_the_home_folder_claims_only_its_own_folders(tmp_path, monkeypatch):
    """The rule's boundary (docs/cleanup.md): a job's working folder and the tree below it are
    the job's - except the home folder (or above), whose tree is everything a user has: a job
    started in ~ would refuse every cleanup. It holds its log folder and the folders above it
    below ~, as before."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    code, logs = _project(home / "CODE"), home / "platform_logs" / "job"
    logs.mkdir(parents=True)
    with JobHold.take([home, logs], "job in ~"):
        CleanupLock.take(code).release()
        for busy in (logs, logs.parent):
            with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):
                CleanupLock.take(busy)


KILLED_HOLDING = """
import os, signal, sys
from platform_plugin.folder_locks.protocol import JobHold
JobHold.take([sys.argv[1]], "job killed")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_cleanup_sweeps_the_lock_files_killed_holders_left(tmp_path):
    """A launcher killed by SIGKILL (OOM killer, a kernel restart) leaves its lock files;
    only the next holder of the same folder removed them, so for a folder never used again
    they stayed for good (46 unheld files in the lock folder after a few hours of tests). Any
    cleanup now removes the lock files nobody holds; a live job's stay."""
    gone, live, other = (_project(tmp_path / name) for name in ("gone", "live", "other"))
    killed = subprocess.run([sys.executable, "-c", KILLED_HOLDING, str(gone)],
                            env=clean_env(), capture_output=True, text=True, timeout=60)
    assert killed.returncode == -9, killed.stderr
    assert _our_lock_files(gone), "the killed job left no lock file: nothing to test"
    with JobHold.take([live], "a live job"):
        CleanupLock.take(other).release()
        assert _our_lock_files(gone) == []
        assert _our_lock_files(live)  # held: kept
        with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):
            CleanupLock.take(live)
