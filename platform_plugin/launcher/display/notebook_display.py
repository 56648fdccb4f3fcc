"""Which display a job gets: the live board inside a Jupyter kernel, prefixed lines elsewhere.

IPython and the board are imported only when a kernel is running (a CLI launch does without
them: the board's rendering, curves and colours are the heaviest part of the display).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from platform_plugin.launcher.display.output import Output
from platform_plugin.variables import PLATFORM_STREAM_TO_TERMINAL

# Set by `platform-run debug|full` for its kernel: the board goes to the notebook and the
# prefixed lines to the terminal that runs platform-run.
TERMINAL_ENV = PLATFORM_STREAM_TO_TERMINAL.name


def in_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, papermill), False in a terminal IPython."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - ipykernel depends on IPython
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def ipython_publisher() -> Callable[[dict], None]:
    """publish(bundle): the first call displays the bundle, later calls update it in place."""
    from IPython.display import display

    handle = None

    def publish(bundle: dict) -> None:
        nonlocal handle
        if handle is None:
            handle = display(bundle, raw=True, display_id=True)
        else:
            handle.update(bundle, raw=True)
    return publish


def terminal_writer() -> Callable[[str], None] | None:
    """The kernel's original stderr (ipykernel forwards fd 2 into the notebook; `fileno()` of
    its stream is the copy it made of the real one), when platform-run asked for it."""
    if PLATFORM_STREAM_TO_TERMINAL.get() != "1":
        return None
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        fd = 2

    def write(text: str) -> None:
        data = text.encode("utf-8", errors="replace")
        while data:
            data = data[os.write(fd, data):]
    return write


def make_board(**output_options: Any) -> Output:
    """The notebook's live board (an Output that redraws one block)."""
    from platform_plugin.launcher.display.board import Board  # (in a kernel only)
    return Board(ipython_publisher(), stream_write=terminal_writer(), **output_options)
