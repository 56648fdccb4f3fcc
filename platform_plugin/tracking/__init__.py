"""Per-rank tracking: params and metrics of every rank, spooled locally and forwarded to MLflow
or the platform's wflogger (see docs/tracking.md).

    from platform_plugin import tracking
    t = tracking.get_tracker()
    t.log_param("lr", 0.01)
    t.log_metric("loss", 0.42, step=10)
"""
from .identity import RankIdentity
from .job import DeliveryReport, JobTracking
from .tracker import NullTracker, Tracker, get_tracker

__all__ = ["get_tracker", "Tracker", "NullTracker", "RankIdentity", "JobTracking", "DeliveryReport"]
