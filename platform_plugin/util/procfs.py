"""Reading other processes through /proc: their environment, process group and ancestry.

Shared by the launcher (stale ranks, stopping every process of a job), `platform-run doctor`,
and the lifeline's reaper, which imports this file without the package: so stdlib only here.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterator


def _raw_environ(pid: int, uid: int | None = None) -> bytes:
    """The raw environ of `pid`; b"" when `uid` is given and the process is not that user's.
    os.open/os.read, not open(): the launcher reads every process's environ at the end of
    every job, and a buffered file object per process would double that scan's work."""
    fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if uid is not None and os.fstat(fd).st_uid != uid:  # (the owner of /proc/<pid>)
            return b""
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _parse_environ(raw: bytes) -> dict[str, str]:
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def ancestors() -> set[int]:
    """This process and its parents: a kernel in the debug env holds DEVICE_ID itself."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = parent(pid)
        except (OSError, ValueError, IndexError):
            break
    return pids


@dataclasses.dataclass
class ProcessInfo:
    """A live process as /proc shows it."""

    pid: int
    ppid: int
    env: dict[str, str] = dataclasses.field(repr=False)
    cmdline: str
    pgid: int = -1


def user_processes(with_variable: str) -> Iterator[ProcessInfo]:
    """This user's live processes (not this one nor its ancestors) started with `with_variable`
    set — how rank processes are recognised, whoever launched them. (A zombie's environ reads
    empty, so zombies never match.)"""
    uid, skip = os.getuid(), ancestors()
    # a byte search before parsing: the launcher scans every process of the user at every end
    # of a job, and most environments do not hold the variable
    wanted = b"\0" + with_variable.encode() + b"="
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        pid = int(entry)
        try:
            raw = _raw_environ(pid, uid)
            if wanted not in b"\0" + raw:
                continue
            env = _parse_environ(raw)
            if with_variable not in env:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            _, ppid, pgid = _stat(pid)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not readable
        yield ProcessInfo(pid, ppid, env, cmdline, pgid)


def group_members(pgids: set[int]) -> dict[int, list[int]]:
    """Live (non-zombie) processes per process group, for the groups in `pgids`."""
    members: dict[int, list[int]] = {}
    pgids = {g for g in pgids if _group_exists(g)}
    if not pgids:  # the usual case at the end of a job: no /proc scan (every process's stat)
        return members
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            state, _, pgid = _stat(int(entry))
        except (OSError, ValueError, IndexError):
            continue
        if pgid in pgids and state not in ("Z", "X"):
            members.setdefault(pgid, []).append(int(entry))
    return members


def _group_exists(pgid: int) -> bool:
    """The kernel knows a process in group `pgid` (a zombie counts: the scan sorts those out)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process: let the scan decide
    return True


def parent(pid: int) -> int:
    """The parent's pid of `pid` (OSError when it is gone)."""
    return _stat(pid)[1]


def alive(pid: int) -> bool:
    """`pid` exists and is not a zombie."""
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except (OSError, ValueError, IndexError):
        return False


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks after boot (/proc/<pid>/stat's 22nd field): with the
    pid, what names one process for good (a pid is reused, the pair is not). None when gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            stat = os.read(fd, 4096)
        finally:
            os.close(fd)
        return int(stat[stat.rfind(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def owner(pid: int) -> int | None:
    """The real uid of `pid` (None when it is gone)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int, int]:
    """(state, ppid, pgid) from /proc/<pid>/stat."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        stat = os.read(fd, 4096)  # one short line
    finally:
        os.close(fd)
    # the fields after the ")" that closes the command name (which may hold spaces and ")")
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[1]), int(fields[2])
