"""The terminal a notebook run streams to may go away; the run must not go with it.

`platform-run full nb.ipynb | tee run.log` whose reader ended (a closed ssh session's pipe, a
`| head`) made the next live write raise BrokenPipeError inside papermill's output hook: the
run stopped mid-notebook with "the notebook could not be run: BrokenPipeError". And a runner
started with stdout or stderr closed (`>&-`, some schedulers) handed that closed descriptor
number to whatever it opened next, and its kernel died before replying to kernel_info. The
output notebook is what a run is for: the stream is a view of it.
"""
from __future__ import annotations

import os
from typing import TextIO


class LiveStream:
    """A text stream that stops writing (silently) once its reader is gone."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.gone = stream is None

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.stream.write(text)  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError, OSError):  # ValueError: closed
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError, OSError):
                self.gone = True

    def isatty(self) -> bool:
        try:
            return not self.gone and self.stream.isatty()  # type: ignore[union-attr]
        except (ValueError, OSError):
            return False


def reopen_closed_std_fds() -> None:
    """/dev/null on 0-2 where a descriptor is closed, so the kernel (which inherits them) and
    every file this process opens get the numbers they expect."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)  # inheritable, as dup2 makes it
                os.close(null)
            else:  # os.open made it close-on-exec: the kernel would still find it closed
                os.set_inheritable(fd, True)
