"""The platform's wflogger SDK (`from wf_analyse.analyse import wflogger`).

The platform's docs call `wflogger.log_param(name=..., value=...)` and suffix every name with
the rank (`learning-{RANK_ID}`), since ranks share one namespace; this sink does the suffixing.
The SDK is not public: metric calls pass `step=` only when its `log_metric` accepts it, and
names stay plain strings, values as logged. It has no runs, so `ensure_runs`/`end_job` only
record what happened; artifacts are not supported by the SDK and are rejected (counted).
"""
from __future__ import annotations

import _thread
import inspect
import threading
from pathlib import Path
from typing import Any

from platform_plugin.tracking.shared.state import SinkConfig, StreamState
from platform_plugin.variables import PLATFORM_WFLOGGER_CALL_TIMEOUT


class WfloggerUnsupported(Exception):
    pass


class WfloggerHung(Exception):
    """A call that did not return in time (transient: retried until the deadline)."""


class _Caller:
    """SDK calls on a thread of their own, one at a time (the SDK's thread safety is unknown;
    the forwarder delivers streams from several threads). The SDK is private and may make
    network calls without a timeout: a call that never returned would keep the forwarding helper
    in it for good, past its drain deadline. So a call fails after PLATFORM_WFLOGGER_CALL_TIMEOUT
    (30 s), and every later one at once while it still hangs; the helper stops at its deadline
    and the records wait for `sync`. A call that returns after its timeout may have been
    delivered: its record is sent again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hung: threading.Event | None = None
        self.timeout = PLATFORM_WFLOGGER_CALL_TIMEOUT.get()  # checked before the job (handle.py)

    def __call__(self, function: Any, **kwargs: Any) -> None:
        with self._lock:
            if self._hung is not None and not self._hung.is_set():
                raise WfloggerHung(f"an earlier wflogger call has not returned after "
                                   f"{self.timeout:g}s")
            done, failure = threading.Event(), []

            def work() -> None:
                try:
                    function(**kwargs)
                except BaseException as exc:  # noqa: BLE001 - handed to the delivering thread
                    failure.append(exc)
                finally:
                    done.set()

            _thread.start_new_thread(work, ())
            if not done.wait(self.timeout):
                self._hung = done
                raise WfloggerHung(f"a wflogger call did not return in {self.timeout:g}s")
            if failure:
                raise failure[0]


class WfloggerSink:
    name = "wflogger"
    limits = {"m": 1, "p": 1, "t": 1, "a": 1, "total": 1}  # see deliver()

    def __init__(self) -> None:
        self._sdk = None
        self._metric_takes_step = False
        self._call = _Caller()

    def sdk(self) -> Any:
        if self._sdk is None:
            from wf_analyse.analyse import wflogger  # the platform SDK
            self._sdk = wflogger
            try:
                self._metric_takes_step = "step" in inspect.signature(wflogger.log_metric).parameters
            except (TypeError, ValueError):
                self._metric_takes_step = False
        return self._sdk

    def unavailable(self, config: SinkConfig) -> str | None:
        try:
            self.sdk()
        except ImportError as exc:
            return f"wflogger SDK not importable ({exc})"
        return None

    def ensure_runs(self, config: SinkConfig, spool_dir: Path, labels: list[str]) -> None:
        pass

    def deliver(self, config: SinkConfig, label: str, state: StreamState,
                records: list[list]) -> None:
        """One SDK call per record: resending a batch after a failure part-way would repeat the
        calls before it, so the forwarder sends wflogger batches of one record (limits)."""
        sdk = self.sdk()
        for record in records:
            kind, name = record[0], f"{record[1]}-{label}"
            if kind == "m":
                if self._metric_takes_step:
                    self._call(sdk.log_metric, name=name, value=record[2], step=record[3])
                else:
                    self._call(sdk.log_metric, name=name, value=record[2])
            elif kind in ("p", "t"):
                self._call(sdk.log_param, name=name, value=record[2])
            else:
                raise WfloggerUnsupported("wflogger has no artifact call")

    def is_permanent(self, exc: BaseException) -> bool:
        return isinstance(exc, (WfloggerUnsupported, TypeError, ValueError))

    def end_job(self, config: SinkConfig, spool_dir: Path, pending: dict[str, int] | None = None) -> bool:
        return True  # wflogger has no runs to end
