"""Quiet by default: library chatter goes to the logs, not to the cell or the terminal.

Two sources, two treatments (`--verbose` turns both off):
- rank output (chatter.py: the display's filter, imported with the output once the ranks run):
  lines of MindSpore's networking (`[WARNING] DISTRIBUTED(...)`, `[INFO] ...`:
  the cluster's connect/retry/register messages, and the collective-communication setup
  lines of `ccsrc/.../collective/`, dozens per rank and job) are kept out of
  the display; the rank logs keep every byte. Their ERROR lines are always shown.
- the launcher's own process (the kernel, in a notebook): MLflow's and alembic's INFO lines
  (store migration, "View run ...") and Python warnings raised while the job is set up,
  supervised and reported (tqdm's TqdmWarning when ipywidgets is missing) are written to
  `<job_dir>/launcher.log` instead of stderr.
"""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
from typing import Iterator

WARNINGS_LOGGER = "platform_plugin.warnings"
LIBRARY_LOGGERS = ("mlflow", "alembic", WARNINGS_LOGGER)
LOG_NAME = "launcher.log"


@contextlib.contextmanager
def libraries_to_log(job_dir: str, verbose: bool) -> Iterator[None]:
    """Route MLflow/alembic logging and Python warnings to `<job_dir>/launcher.log`."""
    if verbose:
        yield
        return
    os.makedirs(job_dir, exist_ok=True)
    route = _Route(os.path.join(job_dir, LOG_NAME))
    route.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = route.warning
            yield
    finally:
        route.stop()


class QuietFileHandler(logging.FileHandler):
    """A log file that cannot be written (a full disk, the folder removed) loses the line: the
    job's own output must not fill with logging's "--- Logging error ---" tracebacks."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # its last lines could not be flushed: lost, as above
            pass


class _Route:
    """The library loggers' handler, set up at the start or by the first warning."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.handler: logging.FileHandler | None = None
        self.saved: list = []

    def start(self) -> None:
        if self.handler is not None:
            return
        handler = QuietFileHandler(self.path, encoding="utf-8", delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in LIBRARY_LOGGERS:
            logger = logging.getLogger(name)
            self.saved.append((logger, logger.handlers[:], logger.propagate))
            logger.handlers = [handler]
            logger.propagate = False
        self.handler = handler

    def warning(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
                file: object = None, line: str | None = None) -> None:
        self.start()
        logging.getLogger(WARNINGS_LOGGER).warning("%s:%s: %s: %s", filename, lineno,
                                                   category.__name__, message)

    def stop(self) -> None:
        for logger, handlers, propagate in self.saved:
            logger.handlers, logger.propagate = handlers, propagate
        if self.handler is not None:
            self.handler.close()
