"""Sink registry: where the forwarder ships spooled records.

A sink implements the `Sink` protocol below. `ensure_runs` is idempotent (it creates only
what is missing and records ids in the state files) so the launcher, the in-process forwarder
and `platform-run sync` all call it the same way.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Protocol

from platform_plugin.errors import ConfigError
from platform_plugin.variables import PLATFORM_TRACKING, PLATFORM_TRACKING_LAYOUT
from platform_plugin.tracking.state import SinkConfig, StreamState

CHOICES = PLATFORM_TRACKING.choices


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
        """True when resending the same records can never succeed."""

    def end_job(self, config: SinkConfig, spool_dir: Path, pending: dict[str, int] | None = None) -> bool:
        """End the job's runs with config.final_status; runs of streams with `pending` records
        stay open (marked) for `sync`. True when everything was ended."""


def _mlflow():
    from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
    return MlflowSink()


def _wflogger():
    from platform_plugin.tracking.sinks.wflogger_sink import WfloggerSink
    return WfloggerSink()


SINKS = {"mlflow": _mlflow, "wflogger": _wflogger}


def get_sink(name: str) -> Sink:
    try:
        return SINKS[name]()
    except KeyError:
        raise ConfigError(f"unknown tracking sink {name!r}: use one of {', '.join(SINKS)}",
                          code="TRACKING_SINK") from None


def wflogger_importable() -> bool:
    try:
        return importlib.util.find_spec("wf_analyse.analyse") is not None
    except ModuleNotFoundError:
        return False


def choose(choice: str | None = None, environ: dict[str, str] | None = None) -> str | None:
    """The sink for a job: the explicit choice, else PLATFORM_TRACKING, else auto. Auto is
    mlflow, except on the platform (its wflogger SDK importable) when no MLflow URI is set.
    Returns None for "none"."""
    env = os.environ if environ is None else environ
    wanted = (choice if choice not in (None, "", "auto") else PLATFORM_TRACKING.raw(env)) or "auto"
    wanted = wanted.strip().lower()
    if wanted not in CHOICES:
        raise ConfigError(f"--tracking / PLATFORM_TRACKING is {wanted!r}: use one of "
                          f"{', '.join(CHOICES)}", code="TRACKING_CHOICE")
    if wanted == "auto":
        wanted = "wflogger" if wflogger_importable() and not env.get("MLFLOW_TRACKING_URI") else "mlflow"
    return None if wanted == "none" else wanted


LAYOUTS = PLATFORM_TRACKING_LAYOUT.choices


def choose_layout(layout: str | None = None, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    value = (layout or PLATFORM_TRACKING_LAYOUT.raw(env) or PLATFORM_TRACKING_LAYOUT.default)
    value = value.strip().lower()
    if value not in LAYOUTS:
        raise ConfigError(f"PLATFORM_TRACKING_LAYOUT is {value!r}: use 'runs' (a child run per "
                          "rank) or 'flat' (one run, keys suffixed -RANK_ID)", code="TRACKING_LAYOUT")
    return value
