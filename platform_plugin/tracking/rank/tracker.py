"""The in-rank API. Every call appends one line to the rank's spool buffer and returns: no
network, no sink, no MLflow import in the training thread.

Without a launcher (no PLATFORM_TRACKING_SPOOL_DIR) the process spools under
`<PLATFORM_LOG_DIR or ./platform_logs>/<job id>/tracking` and forwards from a background thread
of its own, drained at exit.

What a rank logged reaches its spool: the buffer is written every 0.2 s, when 1,000 lines wait,
at exit (atexit) and on SIGTERM (the launcher stops the other ranks with it when one fails): a
handler chained in front of the program's own writes the buffer, then lets the signal do what
it did before. Only SIGKILL can lose the last 0.2 s.

Values over MLflow's documented limits (param values 6,000 characters, tag values 8,000, names
250 or with characters MLflow refuses, a step outside its 64-bit range, a metric value that is
no number) are refused here, with a warning naming them, and counted in the job's delivery report: sent on, they would be refused
by the store or stall a server's request.
"""
from __future__ import annotations

import atexit
import errno
import importlib
import json
import os
import posixpath
import re
import signal
import stat
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.rank.spool import (ARTIFACTS_FOLDER, MAX_INT64, MIN_INT64, SPOOL_SUFFIX,
                                                 SpoolWriter, artifact_path_refusal, encode, encode_metric)

FLUSH_INTERVAL_S = 0.2  # the most a SIGKILLed rank can lose
# MLflow's limits (mlflow.utils.validation: MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH,
# MAX_TAG_VAL_LENGTH), kept here so a rank never imports MLflow
MAX_NAME_CHARS, MAX_PARAM_CHARS, MAX_TAG_CHARS = 250, 6000, 8000
# a step is MLflow's long (64-bit); a value any float: NaN and +/-inf are stored as MLflow
# stores them. The timestamp is this process's clock, always in range.
MIN_STEP, MAX_STEP = MIN_INT64, MAX_INT64
# A process started without the launcher forwards from a thread of its own: the delivery
# layer's work, above the rank side, so loaded by name and only then (the rank side's copy for
# a Python 3.7 image holds no delivery; there the launcher's helper forwards).
INPROCESS_FORWARDING = "platform_plugin.tracking.delivery.inprocess"
REFUSED_KEY = ""  # the key cache's mark for a metric name MLflow refuses (a real key is never empty)
# mlflow.utils.validation's names (metrics, params, tags): these characters, and a path that
# names itself (no "a/../b", no leading "/", "." or "..")
NAME_CHARACTERS = re.compile(r"^[/\w.\- :]*$")


def name_problem(name: str, what: str) -> str:
    """Why MLflow refuses `name` ("" when it takes it), checked as mlflow.utils.validation does."""
    if len(name) > MAX_NAME_CHARS:
        return f"{what} name of {len(name)} characters (MLflow keeps {MAX_NAME_CHARS})"
    if not NAME_CHARACTERS.match(name):
        return (f"{what} name with characters MLflow refuses (alphanumerics, _ - . : space "
                "and / only)")
    normal = posixpath.normpath(name)
    if normal != name or normal == "." or normal.startswith(("..", "/")):
        return f"{what} name that is not a plain path (MLflow refuses it)"
    return ""


class Tracker:
    """Params, metrics, tags and artifacts of one rank. Steps default to a per-key counter
    (0, 1, 2, ...) so curves of ranks line up without passing `step`."""

    def __init__(self, spool_dir: str | os.PathLike, identity: RankIdentity, *,
                 flush_interval: float = FLUSH_INTERVAL_S, on_close: Any | None = None) -> None:
        self.identity = identity
        self.spool_dir = Path(spool_dir)
        self.spool_path = self.spool_dir / f"{identity.stream}{SPOOL_SUFFIX}"
        self._writer = SpoolWriter(self.spool_path)
        self._keys: dict[str, str] = {}  # name -> its JSON spelling, encoded once
        self._refused_names: dict[str, str] = {}  # metric name -> why MLflow refuses it
        self._steps: dict[str, int] = {}
        self._artifacts = 0  # artifact folders made (their names' counter)
        self._on_close = on_close
        self._warned: set[tuple[str, str]] = set()
        self._closed = False
        self._stop = threading.Event()
        self._flush_interval = flush_interval
        self._flusher = threading.Thread(target=self._flush_loop, name="tracking-flush", daemon=True)
        self._flusher.start()

    # --- public API ------------------------------------------------------------------------
    def log_metric(self, name: str, value: Any, step: int | None = None) -> None:
        key = self._keys.get(name)
        if key is None:
            key = self._new_key(name)
        if not key:  # REFUSED_KEY
            self._refuse("m", name, self._refused_names[name])
            return
        if step is None:
            step = self._steps.get(name, 0)
        try:
            number, step = float(value), int(step)
        except (TypeError, ValueError, OverflowError) as exc:  # a value MLflow takes is a float
            self._refuse("m", name, f"value {str(value)[:40]!r} or step {str(step)[:40]!r}: {exc}")
            return
        if not MIN_STEP <= step <= MAX_STEP:
            self._refuse("m", name, f"step {step} outside MLflow's 64-bit range")
            return
        self._steps[name] = step + 1
        self._writer.append(encode_metric(key, number, step, int(time.time() * 1000)))

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        for name, value in metrics.items():
            self.log_metric(name, value, step)

    def log_param(self, name: str, value: Any) -> None:
        name, value = str(name), str(value)
        if self._fits("p", name, value, MAX_PARAM_CHARS):
            self._writer.append(encode("p", name, value))

    def log_params(self, params: dict) -> None:
        for name, value in params.items():
            self.log_param(name, value)

    def set_tag(self, name: str, value: Any) -> None:
        name, value = str(name), str(value)
        if self._fits("t", name, value, MAX_TAG_CHARS):
            self._writer.append(encode("t", name, value))

    def log_artifact(self, local_path: str | os.PathLike, artifact_path: str | None = None) -> None:
        """The file is copied now into the spool folder's `artifacts/` (what is shipped is what
        it held at this call) and the spool names that copy: delivery ships nothing else. A
        file that cannot be copied (none, a folder, a FIFO) is refused here, as an oversized
        value is: a warning, and counted in the job's delivery report."""
        name = os.path.basename(os.fspath(local_path)) or os.fspath(local_path)
        why = artifact_path_refusal(artifact_path)
        if why:
            self._refuse("a", name, why)
            return
        try:
            copy = self._copy_artifact(local_path)
        except OSError as exc:
            self._refuse("a", name, f"cannot copy {os.fspath(local_path)!r}: {exc.strerror or exc}")
            return
        self._writer.append(encode("a", copy, artifact_path))

    def _copy_artifact(self, local_path: str | os.PathLike) -> str:
        """Copy a regular file to `artifacts/<stream>/<unique>/<its name>` under the spool
        folder (a folder of its own per call: two files of one name never meet); the copy's
        path relative to the spool folder."""
        source = os.fspath(local_path)
        name = os.path.basename(source)
        # the rank's own file (its links followed), opened non-blocking: a FIFO must not block
        with open(os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb", buffering=0) as src:
            if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                raise OSError(errno.EINVAL, "not a regular file (log a folder's files one by one)")
            folder = self._artifact_folder()
            fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with open(fd, "wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):
                    dst.write(block)
        return posixpath.join(ARTIFACTS_FOLDER, self.identity.stream, os.path.basename(folder), name)

    def _artifact_folder(self) -> str:
        """A new folder under `artifacts/<stream>/`, named by this process and a counter (a
        forked child's counter goes on from its parent's: its pid differs)."""
        parent = self.spool_dir / ARTIFACTS_FOLDER / self.identity.stream
        parent.mkdir(parents=True, exist_ok=True)
        while True:
            self._artifacts += 1
            folder = os.path.join(str(parent), "%d-%d" % (os.getpid(), self._artifacts))
            try:
                os.mkdir(folder, 0o755)
                return folder
            except FileExistsError:  # left by an earlier process of the same pid
                continue

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._writer.close()
        if self._on_close is not None:
            self._on_close()

    # --- internals -------------------------------------------------------------------------
    def _new_key(self, name: str) -> str:
        """A metric name's JSON spelling, or REFUSED_KEY: checked once per name."""
        text = str(name)
        why = name_problem(text, "metric")
        if why:
            self._refused_names[name] = why
        key = self._keys[name] = REFUSED_KEY if why else json.dumps(text)
        return key

    def _fits(self, kind: str, name: str, value: str, limit: int) -> bool:
        what = {"p": "param", "t": "tag"}[kind]
        why = name_problem(name, what)
        if why:
            self._refuse(kind, name, why)
            return False
        if len(value) > limit:
            self._refuse(kind, name, f"{what} value of {len(value)} characters (MLflow keeps {limit})")
            return False
        return True

    def _refuse(self, kind: str, name: str, why: str) -> None:
        """Warn (once per name) and leave a countable mark in the spool instead of the record."""
        shown = str(name)[:80]
        if (kind, shown) not in self._warned:
            self._warned.add((kind, shown))
            warnings.warn(f"platform_plugin.tracking: {shown!r} not logged: {why}", stacklevel=3)
        self._writer.append(encode("r", kind, shown, why))

    def _flush_loop(self) -> None:
        while not self._stop.wait(self._flush_interval):
            self._writer.flush()

    def _after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker) shares the file but not the parent's buffer;
        its flusher thread did not survive the fork."""
        self._writer.drop_buffer()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="tracking-flush", daemon=True)
        self._flusher.start()


class NullTracker:
    """Tracking switched off (`--tracking none`): same surface, does nothing."""

    identity = None

    def __getattr__(self, name: str) -> Any:
        return _ignore


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


_tracker: Tracker | NullTracker | None = None
_lock = threading.Lock()


def get_tracker() -> Tracker | NullTracker:
    """The process's tracker, created on first use from the environment."""
    global _tracker
    with _lock:
        if _tracker is None:
            _tracker = _create()
            if isinstance(_tracker, Tracker):
                atexit.register(_tracker.close)
                os.register_at_fork(after_in_child=_tracker._after_fork_in_child)
                flush_on_sigterm(_tracker)
        return _tracker


def flush_on_sigterm(tracker: Tracker) -> bool:
    """Chain a handler in front of the program's SIGTERM handling that writes the buffer first.
    Only from the main thread (Python's rule) and only over a handler Python knows (a C-level
    one cannot be chained); a program that installs its own handler later replaces this one,
    and then atexit still writes the buffer if its handler exits."""
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None or previous == signal.SIG_IGN:
        return False

    def on_sigterm(signum: int, frame: Any) -> None:
        tracker.flush()
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signum, signal.SIG_DFL)  # then die of the signal, as by default
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    return True


def _create() -> Tracker | NullTracker:
    # Here, not at the top: importing the rank side loads the stdlib only (tests/test_layout.py);
    # the sink choice reads the package's variables and errors.
    from platform_plugin.tracking.shared.sink_choice import choose
    sink_name = choose(None)
    if sink_name is None:
        return NullTracker()
    identity = RankIdentity.from_env()
    spool_dir = os.environ.get("PLATFORM_TRACKING_SPOOL_DIR")
    if spool_dir:  # the launcher's supervisor forwards
        return Tracker(spool_dir, identity)
    inprocess = importlib.import_module(INPROCESS_FORWARDING)
    return inprocess.start_inprocess_forwarding(sink_name, identity, Tracker)
