"""Ranks of an earlier job that still hold this job's devices (an interrupted cell, a killed
kernel whose ranks lived on): found through /proc/<pid>/environ of this user's processes."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.procfs import alive, user_processes
from platform_plugin.variables import PLATFORM_SERVER_ID


@dataclass(frozen=True)
class StaleRank:
    """A rank of an earlier job that still holds a device of this one."""

    pid: int
    job_id: str
    device_id: str
    rank_id: str
    cmdline: str


def find_stale(device_ids: set[int], server_id: str) -> list[StaleRank]:
    """Processes of this user, launched as ranks (JOB_ID + DEVICE_ID set), on these devices."""
    wanted, found = {str(d) for d in device_ids}, []
    for proc in user_processes("JOB_ID"):
        env = proc.env
        if env.get("DEVICE_ID") not in wanted:
            continue
        if (PLATFORM_SERVER_ID.raw(env) or server_id) != server_id:
            continue
        found.append(StaleRank(proc.pid, env["JOB_ID"], env["DEVICE_ID"],
                               env.get("RANK_ID", "?"), proc.cmdline[:120]))
    return found


def refuse_or_kill(device_ids: set[int], server_id: str, *, kill: bool) -> list[StaleRank]:
    """Raise LAUNCH_STALE_RANKS listing the pids, or (kill=True) SIGKILL them and return them."""
    stale = find_stale(device_ids, server_id)
    if not stale:
        return []
    if not kill:
        rows = "; ".join(f"pid {s.pid} (job {s.job_id}, rank {s.rank_id}, device {s.device_id}: "
                         f"{s.cmdline})" for s in stale)
        raise ConfigError([Problem(
            "LAUNCH_STALE_RANKS",
            f"ranks of an earlier job still hold devices of this job: {rows}. Stop them "
            f"(kill {' '.join(str(s.pid) for s in stale)}) or launch with --kill-stale",
            "DEVICE_ID")])
    for s in stale:
        try:
            if os.getpgid(s.pid) == s.pid:  # a group leader, as our ranks are: its children too
                os.killpg(s.pid, signal.SIGKILL)
            else:  # e.g. started by a shell loop: never take the user's shell down with it
                os.kill(s.pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(s.pid) for s in stale):
        time.sleep(0.05)
    return stale

