"""Sink registry: where the forwarder ships spooled records.

A sink implements the `Sink` protocol below. `ensure_runs` is idempotent (it creates only
what is missing and records ids in the state files) so the launcher, the in-process forwarder
and `platform-run sync` all call it the same way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from platform_plugin.errors import ConfigError
from platform_plugin.tracking.shared.state import SinkConfig, StreamState
from platform_plugin.tracking.shared.sink_choice import (CHOICES, LAYOUTS, choose,  # noqa: F401
                                                      choose_layout, wflogger_importable)
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
from platform_plugin.tracking.sinks.wflogger_sink import WfloggerSink


class Sink(Protocol):
    name: str
    limits: dict[str, int]  # records per batch by kind ("m", "p", "t", "a") and "total"

    def unavailable(self, config: SinkConfig) -> str | None:
        """A quick probe (seconds, not MLflow's retry budget): None, or why the sink is down."""

    def ensure_runs(self, config: SinkConfig, spool_dir: Path, labels: list[str]) -> None: ...

    def deliver(self, config: SinkConfig, label: str, state: StreamState,
                records: list[list]) -> None:
        """All records or an exception; a partial success must be safe to resend."""

    def is_permanent(self, exc: BaseException) -> bool:
        """True when resending the same records can never succeed: the forwarder sets them
        aside. A sink may also answer `refuses_run(exc)`: the refusal is the run's, shared by
        every record of the batch (set aside whole, without halving it), and
        `refuses_access(uri, exc)`: what to fix when the store turned the request away for
        its credentials (the records wait, the forwarder stops asking until they are fixed)."""

    def end_job(self, config: SinkConfig, spool_dir: Path, pending: dict[str, int] | None = None) -> bool:
        """End the job's runs with config.final_status; runs of streams with `pending` records
        stay open (marked) for `sync`. True when everything was ended."""


SINKS: dict[str, Callable[[], Sink]] = {"mlflow": MlflowSink, "wflogger": WfloggerSink}


def get_sink(name: str) -> Sink:
    try:
        return SINKS[name]()
    except KeyError:
        raise ConfigError(f"unknown tracking sink {name!r}: use one of {', '.join(SINKS)}",
                          code="TRACKING_SINK") from None
