"""The launcher's light handle on tracking: `JobTracking` chooses a job's sink and checks its
store before the job exists. Its base, tracking switched off, and the delivery report are in
report.py (all a `--tracking none` launch loads); everything that delivers (the sinks, the
forwarder, the spool state: tracking/job/job_tracking.py) loads only when a job is tracked.
"""
from __future__ import annotations

import os
import time

from platform_plugin.tracking.job.report import DeliveryReport, Untracked

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from platform_plugin.tracking.job.views import PlanView

__all__ = ["DeliveryReport", "JobTracking"]


class JobTracking(Untracked):
    """A job's tracking: `create` gives the no-op base (report.Untracked) or a spooling one."""

    @classmethod
    def create(cls, choice: str, plan: PlanView, *, layout: str | None = None) -> "JobTracking":
        if choice == "none":  # nothing else of tracking is loaded (start-up time of the CLI)
            return cls()
        from platform_plugin.tracking.job.job_tracking import SpoolingJobTracking, job_environment
        from platform_plugin.tracking.job.sink_choice import choose, choose_layout
        env = job_environment(plan)
        sink_name = choose(choice, env)
        if sink_name is None:
            return cls()
        return SpoolingJobTracking(sink_name, plan, choose_layout(layout, env))

    @classmethod
    def check(cls, choice: str, plan: PlanView) -> None:
        """Refuse what `create` would refuse, and an MLFLOW_TRACKING_URI no MLflow client can
        use (tracking/job/uri_check.py), before anything of the job exists: `create` runs once the
        job's folder is made (a bad PLATFORM_TRACKING left it behind)."""
        if choice == "none":
            return
        from platform_plugin.tracking.job.job_tracking import job_environment
        from platform_plugin.tracking.job.sink_choice import choose, choose_layout
        env = job_environment(plan)
        choose_layout(None, env)
        sink = choose(choice, env)
        if sink == "wflogger":  # asked for by name (auto picks it only when it is there)
            from platform_plugin.errors import ConfigError
            from platform_plugin.tracking.job.sink_choice import wflogger_importable
            if not wflogger_importable():  # the helper runs this interpreter and PYTHONPATH
                raise ConfigError("--tracking / PLATFORM_TRACKING is wflogger, but the platform's "
                                  "wflogger SDK (wf_analyse) is not importable here: every point "
                                  "would wait in the spool. Use --tracking mlflow or none off the "
                                  "platform", code="TRACKING_SINK")
            from platform_plugin.variables import PLATFORM_WFLOGGER_CALL_TIMEOUT
            if PLATFORM_WFLOGGER_CALL_TIMEOUT.get(env) <= 0:  # a bad number: ENV_BAD_VALUE
                raise ConfigError(f"{PLATFORM_WFLOGGER_CALL_TIMEOUT.name} must be more than 0 "
                                  "seconds", code="ENV_BAD_VALUE")
        if sink == "mlflow" and env.get("MLFLOW_TRACKING_URI"):
            from platform_plugin.tracking.job.uri_check import check_tracking_uri
            check_tracking_uri(env["MLFLOW_TRACKING_URI"], environ=env)


def wait_for_helper(report: DeliveryReport, timeout: float) -> bool:
    """DeliveryReport.wait_ended of a tracked job: until its forwarding helper is done or gone."""
    from platform_plugin.tracking.delivery.state import HelperStatus, SinkConfig
    spool_dir = report.spool_dir
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = HelperStatus.load(spool_dir)
        if status is not None and (status.phase == "done" or not _alive(status.pid)):
            break
        time.sleep(0.05)
    else:
        return False
    report.parent_run_id = (SinkConfig.load(spool_dir) or SinkConfig("")).parent_run_id
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
