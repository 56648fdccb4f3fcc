"""Per-rank tracking: params and metrics of every rank, spooled locally and forwarded to MLflow
or the platform's wflogger (see docs/tracking.md).

    from platform_plugin import tracking
    t = tracking.get_tracker()
    t.log_param("lr", 0.01)
    t.log_metric("loss", 0.42, step=10)

Every name is loaded on first use (PEP 562): a rank's `get_tracker` loads only the tracker, its
spool and identity; the launcher's side (`JobTracking`, the sinks, the forwarder) is never
loaded into a rank, and the launcher loads it only for a tracked job.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "get_tracker": "platform_plugin.tracking.rank.tracker",
    "Tracker": "platform_plugin.tracking.rank.tracker",
    "NullTracker": "platform_plugin.tracking.rank.tracker",
    "RankIdentity": "platform_plugin.tracking.rank.identity",
    "JobTracking": "platform_plugin.tracking.job.handle",
    "DeliveryReport": "platform_plugin.tracking.job.report",
}

if TYPE_CHECKING:
    from platform_plugin.tracking.job.handle import JobTracking
    from platform_plugin.tracking.job.report import DeliveryReport
    from platform_plugin.tracking.rank.identity import RankIdentity
    from platform_plugin.tracking.rank.tracker import NullTracker, Tracker, get_tracker


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'platform_plugin.tracking' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["get_tracker", "Tracker", "NullTracker", "RankIdentity", "JobTracking", "DeliveryReport"]
