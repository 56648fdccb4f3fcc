"""The platform's wflogger SDK (`from wf_analyse.analyse import wflogger`).

The platform's docs call `wflogger.log_param(name=..., value=...)` and suffix every name with
the rank (`learning-{RANK_ID}`), since ranks share one namespace; this sink does the suffixing.
The SDK is not public: metric calls pass `step=` only when its `log_metric` accepts it, and
names stay plain strings, values as logged. It has no runs, so `ensure_runs`/`end_job` only
record what happened; artifacts are not supported by the SDK and are rejected (counted).
"""
from __future__ import annotations

import inspect
from pathlib import Path

from platform_plugin.tracking.state import SinkConfig, StreamState


class WfloggerUnsupported(Exception):
    pass


class WfloggerSink:
    name = "wflogger"
    limits = {"m": 1, "p": 1, "t": 1, "a": 1, "total": 1}  # see deliver()

    def __init__(self):
        self._sdk = None
        self._metric_takes_step = False

    def sdk(self):
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
                    sdk.log_metric(name=name, value=record[2], step=record[3])
                else:
                    sdk.log_metric(name=name, value=record[2])
            elif kind in ("p", "t"):
                sdk.log_param(name=name, value=record[2])
            else:
                raise WfloggerUnsupported("wflogger has no artifact call")

    def is_permanent(self, exc: BaseException) -> bool:
        return isinstance(exc, (WfloggerUnsupported, TypeError, ValueError))

    def end_job(self, config: SinkConfig, spool_dir: Path, pending: dict[str, int] | None = None) -> bool:
        return True  # wflogger has no runs to end
