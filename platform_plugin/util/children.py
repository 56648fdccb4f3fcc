"""A command's short-lived children that must not outlive it, however it ends.

`platform-run server` starts initdb, pg_ctl and MLflow's schema migration and waits for each.
Started plainly they share its process group: SIGKILLed mid-migration, the command left the
migration (parent 1) retrying the stopped database for more than 80 s. Here each child leads a
session of its own and is handed to `started` (the caller's lifeline: launcher/processes/
spawn.py) before it is waited for, so the lifeline stops its group whenever the command dies;
an exception in the command itself (Ctrl-C included) kills the group at once.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, Callable, Optional

Started = Callable[[int], None]  # a child's pid, which is its process group (a session leader)
WATCH_S = 0.05


def run_in_own_session(cmd: list[str], started: Optional[Started], *,
                       while_waiting: Optional[Callable[[], None]] = None,
                       **popen: Any) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, **popen)` with the child in a session of its own, announced to
    `started` first; `while_waiting` is called every WATCH_S until the child ends (e.g. to hand
    over a daemon the child starts, once its pid is known)."""
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)
    try:
        if started is not None:
            started(proc.pid)
        if while_waiting is None:
            out, err = proc.communicate()
        else:
            while proc.poll() is None:
                while_waiting()
                time.sleep(WATCH_S)
            out, err = proc.communicate()
            while_waiting()
    except BaseException:
        kill_group(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
