"""Reading other processes through /proc: their environment and this process's ancestry.

Shared by the launcher's stale-rank check and `platform-run doctor`, which both look for
rank processes by the variables they were started with.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator


def process_environ(pid: int) -> dict[str, str]:
    """The environment `pid` was started with; raises OSError when it is gone or not ours."""
    with open(f"/proc/{pid}/environ", "rb") as fh:
        raw = fh.read()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def ancestors() -> set[int]:
    """This process and its parents: a kernel in the debug env holds DEVICE_ID itself."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = _parent(pid)
        except (OSError, ValueError, IndexError):
            break
    return pids


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    env: dict[str, str]
    cmdline: str


def user_processes(with_variable: str) -> Iterator[ProcessInfo]:
    """This user's processes (not this one nor its ancestors) started with `with_variable` set
    — how rank processes are recognised, whoever launched them."""
    uid, skip = os.getuid(), ancestors()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        pid = int(entry)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            env = process_environ(pid)
            if with_variable not in env:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            ppid = _parent(pid)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not readable
        yield ProcessInfo(pid, ppid, env, cmdline)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    return int(stat[stat.rfind(b")") + 2:].split()[1])
