"""Process plumbing: spawn a rank in its own process group, stop groups, and a lifeline.

Why two mechanisms make ranks die with the supervisor:
- PR_SET_PDEATHSIG (set in the child between fork and exec) kills the rank itself when the thread
  that spawned it dies, even by SIGKILL; but it does not reach the rank's own children.
- The lifeline: a tiny `sh` watchdog in its own session reads the process-group ids of the ranks
  from a pipe whose write end only the supervisor holds. When the supervisor dies the pipe
  reaches EOF and the watchdog kills every registered group, grandchildren included. On a normal
  end the supervisor writes `done` and the watchdog exits without killing anything.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess

_PR_SET_PDEATHSIG = 1
try:  # resolved once, before any fork: nothing is looked up inside the forked child
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - non-Linux
    _prctl = None

# Reads "<pgid>" lines; on EOF (supervisor gone) TERM, then KILL every group; "done" = clean end.
_WATCHDOG_SH = r"""
trap '' INT TERM HUP
groups=""
while IFS= read -r line; do
  [ "$line" = done ] && exit 0
  groups="$groups $line"
done
for g in $groups; do kill -15 "-$g" 2>/dev/null; done
sleep 1
for g in $groups; do kill -9 "-$g" 2>/dev/null; done
exit 0
"""


def _die_with_parent(parent_pid: int):
    def preexec() -> None:  # runs in the forked child: async-signal-safe work only
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(137)
    return preexec


def spawn(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen:
    """Start one rank: own session/process group, stdout+stderr merged into one pipe."""
    return subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, bufsize=0,
        preexec_fn=_die_with_parent(os.getpid()),
    )


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgids: set[int]) -> dict[int, list[int]]:
    """Live (non-zombie) processes per process group, read from /proc."""
    members: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # fields after the ")" that closes the command name: state ppid pgrp ...
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 3 or fields[0] in (b"Z", b"X"):
            continue
        pgid = int(fields[2])
        if pgid in pgids:
            members.setdefault(pgid, []).append(int(entry))
    return members


class Lifeline:
    """The watchdog described above. `add(pgid)` registers a group; `release()` ends it cleanly."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHDOG_SH], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def add(self, pgid: int) -> None:
        self._write(f"{pgid}\n")

    def release(self) -> None:
        self._write("done\n")
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - sh reads one line at a time
            self._proc.kill()
            self._proc.wait()

    def _write(self, text: str) -> None:
        try:
            self._proc.stdin.write(text.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
