"""The in-rank API. Every call appends one line to the rank's spool buffer and returns: no
network, no sink, no MLflow import in the training thread.

Without a launcher (no PLATFORM_TRACKING_SPOOL_DIR) the process spools under
`<PLATFORM_LOG_DIR or ./platform_logs>/<job id>/tracking` and forwards from a background thread
of its own, drained at exit.
"""
from __future__ import annotations

import atexit
import json
import os
import threading
import time
from pathlib import Path

from platform_plugin.tracking.identity import RankIdentity
from platform_plugin.tracking.spool import SPOOL_SUFFIX, SpoolWriter, encode, encode_metric

FLUSH_INTERVAL_S = 0.2  # the most a SIGKILLed rank can lose


class Tracker:
    """Params, metrics, tags and artifacts of one rank. Steps default to a per-key counter
    (0, 1, 2, ...) so curves of ranks line up without passing `step`."""

    def __init__(self, spool_dir: str | os.PathLike, identity: RankIdentity, *,
                 flush_interval: float = FLUSH_INTERVAL_S, on_close=None):
        self.identity = identity
        self.spool_dir = Path(spool_dir)
        self.spool_path = self.spool_dir / f"{identity.stream}{SPOOL_SUFFIX}"
        self._writer = SpoolWriter(self.spool_path)
        self._keys: dict[str, str] = {}  # name -> its JSON spelling, encoded once
        self._steps: dict[str, int] = {}
        self._on_close = on_close
        self._closed = False
        self._stop = threading.Event()
        self._flush_interval = flush_interval
        self._flusher = threading.Thread(target=self._flush_loop, name="tracking-flush", daemon=True)
        self._flusher.start()

    # --- public API ------------------------------------------------------------------------
    def log_metric(self, name: str, value, step: int | None = None) -> None:
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = json.dumps(str(name))
        if step is None:
            step = self._steps.get(name, 0)
        self._steps[name] = step + 1
        self._writer.append(encode_metric(key, float(value), int(step), int(time.time() * 1000)))

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        for name, value in metrics.items():
            self.log_metric(name, value, step)

    def log_param(self, name: str, value) -> None:
        self._writer.append(encode("p", str(name), str(value)))

    def log_params(self, params: dict) -> None:
        for name, value in params.items():
            self.log_param(name, value)

    def set_tag(self, name: str, value) -> None:
        self._writer.append(encode("t", str(name), str(value)))

    def log_artifact(self, local_path: str | os.PathLike, artifact_path: str | None = None) -> None:
        """The file is read when the forwarder ships it: don't change it afterwards."""
        self._writer.append(encode("a", str(Path(local_path).resolve()), artifact_path))

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

    def __getattr__(self, name):
        return _ignore


def _ignore(*args, **kwargs) -> None:
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
        return _tracker


def _create() -> Tracker | NullTracker:
    from platform_plugin.tracking.sinks import choose
    sink_name = choose(None)
    if sink_name is None:
        return NullTracker()
    identity = RankIdentity.from_env()
    spool_dir = os.environ.get("PLATFORM_TRACKING_SPOOL_DIR")
    if spool_dir:  # the launcher's supervisor forwards
        return Tracker(spool_dir, identity)
    from platform_plugin.tracking.inprocess import start_inprocess_forwarding
    return start_inprocess_forwarding(sink_name, identity, Tracker)
