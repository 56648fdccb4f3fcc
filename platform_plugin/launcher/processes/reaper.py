"""Find and stop every process of one job, wherever it went.

A job's processes are its ranks' process groups plus every process of this user whose
environment carries the job's PLATFORM_JOB_DIR (or its JOB_ID without a PLATFORM_JOB_DIR). The groups catch children that
rewrote their environment (`env -i`); the environment catches grandchildren that left the
groups (`setsid`, a double fork, `nohup ... &` in a new session) since every process a rank
starts inherits it. Both values are generated per job (timestamp + random hex, a folder named
after it), so no other job ever matches; this process and its ancestors (the kernel that runs
`%dist_run`) are never matched, and neither is the lifeline (it does not carry them).

Two callers: the supervisor, inside its loop, at every end of a job; and the lifeline, which
runs this file as a bare script once the supervisor died (see spawn.py). A lifeline of groups
alone (empty JOB_ID and folder: a server's session) matches no environment, only its groups:

    python -S -I reaper.py GRACE JOB_ID JOB_DIR [VARIABLE=VALUE] [PGID ...]

VARIABLE=VALUE (Lifeline.for_tag): also every process carrying it (TaggedProcesses).

-S -I: no site-packages and no package `__init__` (which imports settings, dotenv, tracking),
so it starts fast and cannot fail on a dependency; procfs.py is stdlib only for this reason.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Iterable

if __package__:
    from platform_plugin.util.procfs import group_members, user_processes
else:  # run by the lifeline as a script: procfs is imported on its own, without the package
    here = os.path.dirname(os.path.abspath(__file__))  # platform_plugin/launcher/processes
    sys.path.append(os.path.join(here, os.pardir, os.pardir, "util"))
    from procfs import group_members, user_processes  # type: ignore[no-redef]

POLL_S = 0.05
KILL_FOR_S = 5.0  # SIGKILL rounds (a process may fork between a scan and the kill) end after this


class JobProcesses:
    """The processes of one job: its ranks' groups and whatever carries its variables."""

    def __init__(self, job_id: str, job_dir: str, pgids: set[int] | None = None) -> None:
        self.job_id, self.job_dir = job_id, job_dir
        self.pgids: set[int] = set() if pgids is None else pgids

    def add_group(self, pgid: int) -> None:
        self.pgids.add(pgid)

    def live_groups(self) -> dict[int, list[int]]:
        return group_members(self.pgids)

    def strays(self) -> list[int]:
        """The job's live processes outside its groups (setsid grandchildren, daemons)."""
        if not (self.job_id or self.job_dir):
            return []  # a lifeline of groups alone (Lifeline.for_groups): no environment to match
        return [p.pid for p in user_processes("JOB_ID")
                if p.pgid not in self.pgids and self._ours(p.env)]

    def _ours(self, env: dict) -> bool:
        """The job folder decides; JOB_ID alone only for a process that dropped the folder
        variable. The servers of one multi-server job share the JOB_ID (one job), and when
        they are simulated on one machine each has its own folder: never reap the others'."""
        folder = env.get("PLATFORM_JOB_DIR")
        return folder == self.job_dir or (folder is None and env.get("JOB_ID") == self.job_id)

    def alive(self) -> bool:
        return bool(self.live_groups() or self.strays())

    def signal(self, sig: int, *, only_live_groups: bool) -> None:
        """`sig` to every group (only those with live members: a dead group's id can be reused)
        and to every stray; each process gets it once, so a TERM handler runs once."""
        pgids = set(self.live_groups()) if only_live_groups else self.pgids
        for pgid in pgids:
            signal_group(pgid, sig)
        signal_pids(self.strays(), sig)

    def stop(self, grace: float) -> None:
        """The supervisor's stop policy, blocking: SIGTERM, SIGKILL after `grace`, until none
        is left (or KILL_FOR_S passed: a process stuck in the kernel cannot be helped)."""
        self.signal(signal.SIGTERM, only_live_groups=True)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.alive():
            time.sleep(POLL_S)
        deadline = time.monotonic() + KILL_FOR_S
        while time.monotonic() < deadline and self.alive():
            self.signal(signal.SIGKILL, only_live_groups=True)
            time.sleep(POLL_S)


class TaggedProcesses(JobProcesses):
    """Every process of this user whose environment carries `variable=value`, wherever it went:
    the stop policy of a job, for what a notebook run's kernel started (no groups of its own)."""

    def __init__(self, variable: str, value: str) -> None:
        super().__init__("", "")
        self.variable, self.value = variable, value

    def strays(self) -> list[int]:
        return [p.pid for p in user_processes(self.variable)
                if p.env.get(self.variable) == self.value]


def described(pids: Iterable[int]) -> str:
    """`1234 (python serve.py), 1240 (sleep 100)`: what a note names (the first two words of a
    command line; a process gone meanwhile is its pid alone)."""
    words = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read(4096).split(b"\0")[:2]
        except OSError:
            argv = []
        name = " ".join(os.path.basename(a.decode(errors="replace")) for a in argv if a)
        words.append(f"{pid} ({name})" if name else str(pid))
    return ", ".join(words)


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: list[str]) -> int:
    grace, job_id, job_dir, *rest = argv
    JobProcesses(job_id, job_dir, {int(g) for g in rest if "=" not in g}).stop(float(grace))
    for tag in (t for t in rest if "=" in t):
        TaggedProcesses(*tag.split("=", 1)).stop(float(grace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
