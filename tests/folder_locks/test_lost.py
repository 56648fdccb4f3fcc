"""A lock file deleted under a running job (a user's rm), or the whole lock folder removed (a
/tmp cleaner such as systemd-tmpfiles ages /tmp): the job keeps its flock on the old inode.
Before, a cleanup opened the name anew, got the new file exclusively and removed the job's
files; now it asks the kernel (/proc/locks, the holder's /proc/<pid>/fd) and refuses
CLEAN_ROOT_BUSY naming the holder. Real processes, real flocks."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from platform_plugin.folder_locks.cleanup import CleanupLock
from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks import protocol
from platform_plugin.folder_locks.protocol import JobHold, held_folders, lock_path
from tests.helpers import clean_env


def _project(folder):
    (folder / "kernel_meta").mkdir(parents=True)
    (folder / "kernel_meta" / "op.o").write_text("x")
    (folder / "train.py").write_text("print()")  # a CODE/-like folder: clean accepts it
    return folder


def _clean(root) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platform_plugin", "clean", "--root", str(root)],
                          cwd=root, env=clean_env(), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("cleaned", ["working folder", "folder below it"])
def test_a_cleanup_sees_a_job_whose_lock_files_were_deleted(tmp_path, cleaned):
    exp = _project(tmp_path / "CODE" / "exp")
    sub = _project(exp / "sub")
    root = exp if cleaned == "working folder" else sub
    hold = JobHold.take([exp], "job j")  # this process: the clean below is another one
    try:
        for folder in held_folders([exp]):
            for kind in ("code", "tree"):
                if os.path.exists(lock_path(folder, kind)):
                    os.unlink(lock_path(folder, kind))
        done = _clean(root)
        assert done.returncode == 2, done.stdout + done.stderr  # old code: 0, files removed
        assert "[CLEAN_ROOT_BUSY]" in done.stderr and "job j" in done.stderr, done.stderr
        assert f"pid {os.getpid()} still holds it" in done.stderr, done.stderr
        assert (root / "kernel_meta" / "op.o").exists()
    finally:
        hold.release()
    done = _clean(root)
    assert done.returncode == 0 and not (root / "kernel_meta").exists(), done.stderr


HOLDER = """
import sys, time
from platform_plugin.folder_locks import protocol
protocol.LOCKS_IN = sys.argv[2]
hold = protocol.JobHold.take([sys.argv[1]], "job in a notebook")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("tmp", ["folder", "symlink"])
def test_a_cleanup_sees_a_job_after_the_lock_folder_was_removed(tmp_path, monkeypatch, tmp):
    """The lock folder of this test (LOCKS_IN): removing the machine's real one would take the
    other running tests' locks too. `symlink`: a /tmp that is a symbolic link (/proc names
    the holder's file by the real path)."""
    locks_in = tmp_path / "tmp"
    if tmp == "symlink":
        (tmp_path / "real_tmp").mkdir()
        locks_in.symlink_to(tmp_path / "real_tmp")
    else:
        locks_in.mkdir()
    monkeypatch.setattr(protocol, "LOCKS_IN", str(locks_in))
    monkeypatch.setattr(protocol, "_checked_dir", [])
    exp = _project(tmp_path / "CODE" / "exp")
    job = subprocess.Popen([sys.executable, "-c", HOLDER, str(exp), str(locks_in)],
                           env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert job.stdout.readline() == "held\n"
        shutil.rmtree(protocol.lock_dir())  # a /tmp cleaner
        with pytest.raises(ConfigError, match=f"CLEAN_ROOT_BUSY.*job in a notebook.*pid {job.pid}"):
            CleanupLock.take(exp)
        with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):
            CleanupLock.take(exp.parent)  # a folder above it: the job's code lock there
    finally:
        job.communicate("", timeout=60)
    CleanupLock.take(exp).release()  # the holder has ended: nothing left in the way


def test_a_last_holder_unlinking_its_file_for_an_instant_is_not_a_refusal(tmp_path, monkeypatch):
    """release()/a check unlink the file they hold, then close it: in that instant /proc shows
    a hold on a deleted file. Seen once (the first look), gone at the next: no refusal."""
    from platform_plugin.folder_locks import lost
    exp = _project(tmp_path / "CODE" / "exp")
    looks = []

    def seen_once(wanted):
        looks.append(1)
        return [(next(iter(wanted)), 1, "job ending (pid 1)")] if len(looks) == 1 else []
    monkeypatch.setattr(lost, "deleted_holds", seen_once)
    CleanupLock.take(exp).release()
    assert len(looks) == 2


ON_BTRFS = """
set -u
mount -o loop "$1" "$2" || exit 97
cd "$2" && "$3" -c "$4" "$2"
"""
CLEAN_AFTER_RM = """
import shutil, subprocess, sys
from platform_plugin.folder_locks.cleanup import CleanupLock
from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks import protocol
locks_in = sys.argv[1] + "/tmp"
protocol.LOCKS_IN = locks_in
exp = sys.argv[1] + "/CODE/exp"
job = subprocess.Popen([sys.executable, "-c", %r, exp, locks_in], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True)
assert job.stdout.readline() == "held\\n"
shutil.rmtree(protocol.lock_dir())
try:
    CleanupLock.take(exp).release()
    print("cleaned under a running job")
except ConfigError as exc:
    print("refused", exc)
job.communicate("")
""" % HOLDER


def _btrfs_image(tmp_path) -> str:
    if os.geteuid() != 0 or not shutil.which("mkfs.btrfs") or not shutil.which("unshare"):
        pytest.skip("needs root, mkfs.btrfs (btrfs-progs) and unshare: a btrfs loop mount")
    image = tmp_path / "btrfs.img"
    with open(image, "wb") as fh:
        fh.truncate(128 << 20)
    made = subprocess.run(["mkfs.btrfs", "-q", str(image)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"mkfs.btrfs: {made.stderr.strip()}")
    return str(image)


def test_a_cleanup_sees_a_job_whose_lock_folder_was_removed_on_btrfs(tmp_path):
    """/proc/locks names the superblock's device, stat() a btrfs subvolume's own one: a holder
    matched by device was never found on a btrfs /tmp (the clean went ahead)."""
    image, mnt = _btrfs_image(tmp_path), tmp_path / "mnt"
    mnt.mkdir()  # the script makes the lock folder and a CODE/-like project on the mount
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", ON_BTRFS, "sh", image, str(mnt), sys.executable,
         "import os, sys; [os.makedirs(sys.argv[1] + p) for p in ('/tmp', '/CODE/exp/kernel_meta')]; "
         "open(sys.argv[1] + '/CODE/exp/train.py', 'w').close(); exec(" + repr(CLEAN_AFTER_RM) + ")"],
        env=clean_env(), capture_output=True, text=True, timeout=120)
    if done.returncode == 97:
        pytest.skip(f"no loop mount here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused") and "CLEAN_ROOT_BUSY" in done.stdout, done.stdout
