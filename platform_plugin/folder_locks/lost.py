"""Holds on lock files that were deleted under their holders (folder_locks/protocol.py's files).

A lock file removed by hand, or the whole lock folder removed by a /tmp cleaner
(systemd-tmpfiles ages /tmp), while a job holds it: the job keeps its flock on the old inode,
and a cleanup opening the name makes a new file and gets it exclusively - flock sees no
conflict, and the cleanup would remove what the job writes. The kernel still knows the hold:
/proc/locks lists every flock with its holder's pid and the file's device and inode, and the
holder's /proc/<pid>/fd names the file it opened, with " (deleted)". A cleanup asks both
(only this user's processes can be read: the lock folder is per user anyway).
"""
from __future__ import annotations

import os

PROC_LOCKS = "/proc/locks"
DELETED = " (deleted)"


def deleted_holds(wanted: dict[str, bool]) -> list[tuple[str, int, str]]:
    """(path, pid, holder line) for each live process but this one holding a flock on a
    deleted file that was named `path`; `wanted`: path -> whether any hold counts (else only
    an exclusive one). Empty when /proc cannot tell (no /proc/locks)."""
    if not wanted:
        return []
    # /proc names the file by its real path (a /tmp that is a symlink: the folder it points to)
    real = {os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p)): p
            for p in wanted}
    held = _flocks(exclusive_only=all(not any_hold for any_hold in wanted.values()))
    found = []
    for pid, inodes in held.items():
        for path, fd_path in _deleted_files(pid, inodes, {r: wanted[p] for r, p in real.items()}):
            found.append((real[path], pid, _holder_line(fd_path) or f"pid {pid}"))
    return found


def _flocks(exclusive_only: bool) -> dict[int, dict[int, str]]:
    """pid -> {inode: READ|WRITE} of the flocks held. Not narrowed to the lock folder's device:
    /proc/locks names the superblock's device, which is not stat()'s on btrfs (a subvolume's
    own device number, even for the top volume) - a device filter there found no holder at
    all. A hold is matched by the holder's fd below (the deleted file's name and inode)."""
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return {}
    held: dict[int, dict[int, str]] = {}
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF" ("->": a waiter)
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        if exclusive_only and parts[3] != "WRITE":
            continue
        try:
            pid, inode = int(parts[4]), int(parts[5].rsplit(":", 1)[1])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid():  # our own holds are ours to know (a full run's JobHold)
            held.setdefault(pid, {})[inode] = parts[3]
    return held


def _deleted_files(pid: int, inodes: dict[int, str], wanted: dict[str, bool]):
    """(path, /proc/pid/fd/N) of the wanted deleted files `pid` holds open and locked."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # ended, or another user's
        return
    for fd in fds:
        fd_path = os.path.join(fd_dir, fd)
        try:
            target = os.readlink(fd_path)
            if not target.endswith(DELETED) or target[:-len(DELETED)] not in wanted:
                continue
            mode = inodes.get(os.stat(fd_path).st_ino)
        except OSError:
            continue
        path = target[:-len(DELETED)]
        if mode is not None and (wanted[path] or mode == "WRITE"):
            yield path, fd_path


def _holder_line(fd_path: str) -> str:
    """The holder's name the file holds (protocol.write_holder), read through /proc."""
    try:
        with open(fd_path, "rb") as fh:
            return fh.read(512).decode("utf-8", "replace").strip()
    except OSError:
        return ""
