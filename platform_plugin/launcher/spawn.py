"""Process plumbing: spawn a rank in its own process group, and a lifeline.

Why two mechanisms make a job's processes die with the supervisor:
- PR_SET_PDEATHSIG (set in the child between fork and exec) kills the rank itself when the thread
  that spawned it dies, even by SIGKILL; but it does not reach the rank's own children.
- The lifeline: a tiny `sh` watchdog in its own session reads the process-group ids of the ranks
  from a pipe whose write end only the supervisor holds. When the supervisor dies the pipe
  reaches EOF and the watchdog runs reaper.py, which stops the groups and every process that
  carries the job's JOB_ID (setsid grandchildren too): SIGTERM, SIGKILL after the grace. On a
  normal end the supervisor writes `done` and the watchdog exits without killing anything.
  The waiting is done by `sh` (about 1 ms to start, paid by every job); Python starts only in
  the rare case that needs it, the supervisor's death.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1
try:  # resolved once, before any fork: nothing is looked up inside the forked child
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - non-Linux
    _prctl = None

# Reads "<pgid>" lines; "done" = clean end. On EOF (supervisor gone) runs the reaper command
# given as arguments, with the groups appended; if that cannot run, it still KILLs the groups.
# Signals are ignored (and stay ignored in the reaper) so the stop that killed the supervisor
# does not take its clean-up down with it.
_WATCHDOG_SH = r"""
trap '' INT TERM HUP
groups=""
while IFS= read -r line; do
  [ "$line" = done ] && exit 0
  groups="$groups $line"
done
"$@" $groups || for g in $groups; do kill -9 "-$g" 2>/dev/null; done
exit 0
"""
_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
# an enclosing job (a launcher started by a rank) sweeps by these: its sweep must not end this
# job's lifeline before the lifeline has stopped this job
_ENCLOSING_JOB_VARIABLES = ("JOB_ID", "PLATFORM_JOB_DIR")


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


class Lifeline:
    """The watchdog described above for the job `job_id` (logs in `job_dir`). `add(pgid)`
    registers a group; `release()` ends it cleanly."""

    def __init__(self, job_id: str, job_dir: str, grace: float) -> None:
        reaper = [sys.executable or "python3", "-S", "-I", _REAPER, f"{grace:g}", job_id, job_dir]
        env = {k: v for k, v in os.environ.items() if k not in _ENCLOSING_JOB_VARIABLES}
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHDOG_SH, "platform-lifeline", *reaper], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            close_fds=True, env=env)

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
