"""What a notebook run's kernel started and left behind, stopped when the run ends.

A cell's `subprocess.Popen(['setsid', ...])`, a daemon, a server started with `nohup ... &`
leave the kernel's process group and outlive it (parent PID 1). The kernel runs with a tag of
its own run in its environment, which every process it starts inherits; when the run ends -
success, failure, Ctrl-C - every process of this user still carrying the tag is stopped by the
launcher's own sweep (launcher/processes/reaper.py), as a job's strays are.
"""
from __future__ import annotations

import contextlib
import secrets
from typing import Iterator

from platform_plugin.launcher.processes.reaper import TaggedProcesses
from platform_plugin.variables import PLATFORM_NOTEBOOK_RUN

# SIGTERM first, SIGKILL after this: a stray that cleans up on SIGTERM gets the chance
GRACE_S = 3.0


@contextlib.contextmanager
def swept() -> Iterator[dict[str, str]]:
    """Yields the variable to put in the kernel's environment; on exit (however the run ended)
    stops every process that still carries it."""
    tag = {PLATFORM_NOTEBOOK_RUN.name: secrets.token_hex(12)}
    try:
        yield tag
    finally:
        TaggedProcesses(*tag.popitem()).stop(GRACE_S)
