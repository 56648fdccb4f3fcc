"""MLflow conventions, the MLflow side: standard tags with MLflow's own keys and helpers, and
MLflow's console output moved out of the user's cell into the job's log folder."""
from __future__ import annotations

import logging
import logging.config
import os
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the UI opens the training-runs table

SOURCE_TYPES = ("NOTEBOOK", "JOB", "PROJECT", "LOCAL", "UNKNOWN", "RECIPE")  # MLflow's SourceType


def standard_tags(job: dict) -> dict[str, str]:
    """`mlflow.user`, `mlflow.source.name/type` and, when the source is in a git repository,
    `mlflow.source.git.commit/branch/repoURL` — what MLflow's own run-context providers set, so
    the UI's "Created by" and "Source" are filled. MLflow's tag keys, without importing MLflow
    (the forwarding helper talks REST to a server: mlflow_rest.py)."""
    tags = {}
    if job.get("user"):
        tags["mlflow.user"] = job["user"]
    source = job.get("source")
    if source:
        tags["mlflow.source.name"] = source
        kind = job.get("source_type") or "LOCAL"
        tags["mlflow.source.type"] = kind if kind in SOURCE_TYPES else "LOCAL"
        tags.update(git_tags(source))
    return tags


def git_tags(source: str) -> dict[str, str]:
    """What MLflow's git_utils find (through GitPython, i.e. the git command): the commit (none
    when the folder is git-ignored), the branch (none when detached), the first remote's URL
    without credentials."""
    path = Path(source)
    path = path if path.exists() else path.parent  # a notebook run's copy may not exist yet
    if not path.exists():
        return {}
    folder = str(path.resolve().parent if path.is_file() else path)
    found = {}
    head = _git(folder, "rev-parse", "HEAD", "--symbolic-full-name", "HEAD")
    if head is not None and _git(folder, "check-ignore", "-q", folder) is None:
        lines = head.splitlines()
        found["mlflow.source.git.commit"] = lines[0] if lines else ""
        ref = lines[1] if len(lines) > 1 else ""
        found["mlflow.source.git.branch"] = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ""
    remotes = _git(folder, "config", "--get-regexp", r"^remote\..*\.url$")
    if remotes:
        found["mlflow.source.git.repoURL"] = _without_credentials(remotes.splitlines()[0].split(" ", 1)[-1])
    return {k: v for k, v in found.items() if v}


def _git(folder: str, *args: str) -> str | None:
    """The command's output, None when it fails (not a repository, no git, nothing matched)."""
    try:
        done = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


class _Divert(logging.Filter):
    """On MLflow's console handlers: records logged by a thread inside `quiet()` go to that
    thread's log file instead of the console; other threads (the user's own MLflow calls in the
    same kernel) are untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[int, logging.Handler] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        handler = self.files.get(record.thread) if record.thread is not None else None
        if handler is None:
            return True
        handler.handle(record)
        return False


_divert = _Divert()
_lock = threading.Lock()


class _WhileInside:
    """A process-wide change that holds while any thread is inside `held()`: made at the
    first entry, undone after the last exit (threads of one process share it)."""

    def __init__(self, make: Callable[[], None], undo: Callable[[], None]) -> None:
        self._make, self._undo, self._inside = make, undo, 0

    @contextmanager
    def held(self) -> Iterator[None]:
        with _lock:
            if self._inside == 0:
                self._make()
            self._inside += 1
        try:
            yield
        finally:
            with _lock:
                self._inside -= 1
                if self._inside == 0:
                    self._undo()


_URL_ENV = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"  # MLflow reads it at each set_terminated
_saved_url_env: list = []  # the user's value while any thread is inside quiet()


def _suppress_url() -> None:
    _saved_url_env.append(os.environ.get(_URL_ENV))
    os.environ[_URL_ENV] = "true"


def _restore_url() -> None:
    saved = _saved_url_env.pop()
    if saved is None:
        os.environ.pop(_URL_ENV, None)
    else:
        os.environ[_URL_ENV] = saved


_url_suppressed = _WhileInside(_suppress_url, _restore_url)


@contextmanager
def quiet(log_path: Path | None) -> Iterator[None]:
    """MLflow's INFO lines (store creation, migrations) and its "View run … at" print go to
    `log_path` (the job's tracking folder) while this thread works in the block."""
    if log_path is None:
        yield
        return
    import mlflow  # noqa: F401 - importing it installs the console handlers filtered here
    thread = threading.get_ident()
    if thread in _divert.files:  # nested
        yield
        return
    handler = logging.FileHandler(log_path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    with _lock:
        for name in ("mlflow", "alembic"):
            for h in logging.getLogger(name).handlers:
                if _divert not in h.filters:
                    h.addFilter(_divert)
        _divert.files[thread] = handler
    try:
        with _url_suppressed.held():
            yield
    finally:
        with _lock:
            _divert.files.pop(thread, None)
        handler.close()


# MLflow's migration scripts' config; up to MLflow 3.1 its env.py hands it to fileConfig
_MIGRATIONS_INI = os.path.join("mlflow", "store", "db_migrations", "alembic.ini")
_file_config: Callable[..., Any] | None = None  # logging.config.fileConfig as found


def _file_config_but_migrations(fname: Any, *args: Any, **kwargs: Any) -> None:
    if _file_config is not None and not str(fname).endswith(_MIGRATIONS_INI):
        _file_config(fname, *args, **kwargs)


def _skip_migrations_config() -> None:
    global _file_config
    _file_config, logging.config.fileConfig = logging.config.fileConfig, _file_config_but_migrations


def _restore_file_config() -> None:
    global _file_config
    if _file_config is not None:
        logging.config.fileConfig, _file_config = _file_config, None


_migrations_skipped = _WhileInside(_skip_migrations_config, _restore_file_config)


def migrations_keep_logging() -> Any:
    """Around the first open of a store (which creates or upgrades its tables). MLflow up to 3.1
    runs `logging.config.fileConfig(<its alembic.ini>)` from its migration env.py: that replaces
    the root logger's handlers with one writing to stderr at WARNING (in a notebook kernel: the
    cell, for the rest of the kernel's life) and prints alembic's INFO lines there
    ("Running upgrade ..."). Inside this block that one call is skipped, so the process's logging
    stays as the user set it and alembic's lines stay below the level shown (MLflow 3.17 sets
    alembic to WARNING itself). Any other fileConfig call, from any thread, goes through."""
    return _migrations_skipped.held()
