"""A stop asked by a signal, made Ctrl-C's: SIGTERM (the platform ending a run, `platform-run
stop`, a service manager) or SIGHUP ends a command through its KeyboardInterrupt path
(children stopped, the notebook so far named, servers shut down), and an error that such a
KeyboardInterrupt caused is still recognised as the stop it is."""
from __future__ import annotations

from types import FrameType

INTERRUPTED_EXIT = 130  # 128 + SIGINT: what a shell reports for a command Ctrl-C ended


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """A signal handler: the signal ends the command as Ctrl-C does."""
    raise KeyboardInterrupt


def is_interruption(exc: BaseException) -> bool:
    """Whether `exc` is the user's stop: a KeyboardInterrupt, or an error one caused. A signal
    handled while an import runs a class body's `__set_name__` (the standard library's
    `platform`, imported by pyzmq and so by Jupyter's modules) surfaces as a RuntimeError whose
    cause is the KeyboardInterrupt: still the stop, not a crash."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, KeyboardInterrupt):
            return True
        cause = cause.__cause__
    return False
