"""Reading other processes through /proc: their environment and this process's ancestry.

Shared by the launcher's stale-rank check and `platform-run doctor`, which both look for
rank processes by the variables they were started with.
"""
from __future__ import annotations

import os


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
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            pid = int(stat[stat.rfind(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids
