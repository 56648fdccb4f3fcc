"""What a notebook run's kernel started and left behind, stopped when the run ends.

A cell's `subprocess.Popen(['setsid', ...])`, a daemon, a server started with `nohup ... &`
leave the kernel's process group and outlive it (parent PID 1). The kernel runs with a tag of
its own run in its environment, which every process it starts inherits; when the run ends -
success, failure, Ctrl-C - every process of this user still carrying the tag is stopped by the
launcher's own sweep (launcher/processes/reaper.py), as a job's strays are; if this process is
SIGKILLed, its lifeline (spawn.Lifeline.for_tag) runs the same sweep.
"""
from __future__ import annotations

import contextlib
import secrets
from typing import Iterator

from platform_plugin.launcher.processes.reaper import TaggedProcesses
from platform_plugin.launcher.processes.spawn import Lifeline
from platform_plugin.variables import PLATFORM_NOTEBOOK_RUN

# SIGTERM first, SIGKILL after this: a stray that cleans up on SIGTERM gets the chance
GRACE_S = 3.0


@contextlib.contextmanager
def swept() -> Iterator[dict[str, str]]:
    """Yields the variable to put in the kernel's environment; on exit (however the run ended)
    stops every process that still carries it."""
    name, value = PLATFORM_NOTEBOOK_RUN.name, secrets.token_hex(12)
    lifeline = Lifeline.for_tag(name, value, GRACE_S)  # this process SIGKILLed: it sweeps
    try:
        yield {name: value}
    finally:
        TaggedProcesses(name, value).stop(GRACE_S)
        lifeline.release()
