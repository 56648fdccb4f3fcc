"""The output notebook is saved atomically: a temporary file next to it, then a rename.

papermill rewrites the output notebook in place after cells; on a full disk that left a
truncated, unreadable .ipynb and lost every cell saved before. With a rename, a save that
fails leaves the last good save in place, and the run stops with `OutputNotSaved` (what and
where), not an OSError from papermill's frames. An output that exists and is not a regular
file (`/dev/null`, a FIFO) is written in place, as papermill does.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator


def outputs_folder(output: str) -> str:
    """`runs/x.ipynb` -> `runs/x.outputs`: where the cells' whole outputs go (bounded.py)."""
    base, ext = os.path.splitext(output)
    return (base if ext == ".ipynb" else output) + ".outputs"


class OutputNotSaved(OSError):
    """A save of the output notebook failed; the file holds the last good save (if any)."""


@contextlib.contextmanager
def atomic_saves(output: str) -> Iterator[None]:
    """While inside, papermill writes `output` (this path only) through `_AtomicSave`."""
    from papermill.iorw import LocalHandler, papermill_io

    class _AtomicSave(LocalHandler):
        def write(self, buf: str, path: str) -> None:
            if os.path.exists(path) and not os.path.isfile(path):
                _write_through(buf, path)  # /dev/null, a FIFO: never renamed over
                return
            partial = os.path.join(os.path.dirname(path),
                                   f".{os.path.basename(path)}.{os.getpid()}.partial")
            try:
                with open(partial, "w", encoding="utf-8") as handle:
                    handle.write(buf)
                os.replace(partial, path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(partial)
                raise OutputNotSaved(exc.errno, exc.strerror, path) from None

    entry = (output, _AtomicSave())  # papermill picks the newest handler whose prefix matches
    papermill_io.register(*entry)
    try:
        yield
    finally:
        papermill_io._handlers.remove(entry)


def _write_through(buf: str, path: str) -> None:
    """papermill's habit `--output /dev/null` (and a FIFO) is written in place: a rename would
    replace the device node itself with a regular file."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(buf)
    except OSError as exc:
        raise OutputNotSaved(exc.errno, exc.strerror, path) from None
