"""The launcher's light handle on tracking: the delivery report and `JobTracking`, whose base
class is tracking switched off (`--tracking none`). Everything that delivers (the sinks, the
forwarder, the spool state: tracking/job_tracking.py) loads only when a job is tracked, so a
`--tracking none` launch and `platform-run launch` start without it.
"""
from __future__ import annotations

import os
import time

from platform_plugin.util.record import Record
from platform_plugin.variables import tracking_off

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from platform_plugin.tracking.views import PlanView, ResultView


class DeliveryReport(Record):
    """What tracking delivered for a job, what still waits, and why. skipped: spool lines that
    were not records (a rank killed mid-write); rejected: records the sink refused for good;
    refused: records the tracker refused in the rank (over MLflow's size limits); quarantined:
    spool lines too large to deliver, kept in rank_<N>.jsonl.quarantine. (A plain class: no
    `dataclasses` on the launch path.)"""

    __slots__ = ("sink", "delivered", "pending", "reason", "parent_run_id", "ui_hint", "skipped",
                 "rejected", "spool_dir", "refused", "quarantined")

    def __init__(self, sink: str = "none", delivered: int = 0, pending: int = 0, reason: str = "",
                 parent_run_id: str | None = None, ui_hint: str = "", skipped: int = 0,
                 rejected: int = 0, spool_dir: str = "", refused: int = 0,
                 quarantined: int = 0) -> None:
        self.sink, self.delivered, self.pending, self.reason = sink, delivered, pending, reason
        self.parent_run_id, self.ui_hint, self.skipped = parent_run_id, ui_hint, skipped
        self.rejected, self.spool_dir, self.refused = rejected, spool_dir, refused
        self.quarantined = quarantined

    def wait_ended(self, timeout: float = 120.0) -> bool:
        """Wait until the forwarding helper has finished (runs ended, or left open for sync):
        for tests and scripts that read the runs right after `launch()`. Refreshes the report."""
        if not self.spool_dir:
            return True
        from platform_plugin.tracking.state import HelperStatus, SinkConfig
        spool_dir = self.spool_dir
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = HelperStatus.load(spool_dir)
            if status is not None and (status.phase == "done" or not _alive(status.pid)):
                break
            time.sleep(0.05)
        else:
            return False
        self.parent_run_id = (SinkConfig.load(spool_dir) or SinkConfig("")).parent_run_id
        return True


class JobTracking:
    """Base = tracking switched off: every step is a no-op, so the launcher never branches."""

    sink = "none"

    @classmethod
    def create(cls, choice: str, plan: PlanView, *, layout: str | None = None) -> "JobTracking":
        if choice == "none":  # nothing else of tracking is loaded (start-up time of the CLI)
            return cls()
        from platform_plugin.tracking.job_tracking import SpoolingJobTracking, job_environment
        from platform_plugin.tracking.sink_choice import choose, choose_layout
        env = job_environment(plan)
        sink_name = choose(choice, env)
        if sink_name is None:
            return cls()
        return SpoolingJobTracking(sink_name, plan, choose_layout(layout, env))

    @classmethod
    def check(cls, choice: str, plan: PlanView) -> None:
        """Refuse what `create` would refuse, and an MLFLOW_TRACKING_URI no MLflow client can
        use (tracking/uri_check.py), before anything of the job exists: `create` runs once the
        job's folder is made (a bad PLATFORM_TRACKING left it behind)."""
        if choice == "none":
            return
        from platform_plugin.tracking.job_tracking import job_environment
        from platform_plugin.tracking.sink_choice import choose, choose_layout
        env = job_environment(plan)
        choose_layout(None, env)
        sink = choose(choice, env)
        if sink == "wflogger":  # asked for by name (auto picks it only when it is there)
            from platform_plugin.errors import ConfigError
            from platform_plugin.tracking.sink_choice import wflogger_importable
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
            from platform_plugin.tracking.uri_check import check_tracking_uri
            check_tracking_uri(env["MLFLOW_TRACKING_URI"], environ=env)

    def prepare(self) -> dict[str, str]:
        return tracking_off()

    def start(self) -> None:
        pass

    def started(self, supervisor=None) -> None:
        """Supervisor observer: the ranks are running."""
        self.start()

    def finish(self, result: ResultView, last: bool = True, waiting=None) -> DeliveryReport:
        """End.json, then wait for delivery up to the drain deadline. `waiting()` is called once
        if that wait is not over at once (the launcher records the ranks' end in job.json then,
        instead of always writing it one more time)."""
        return DeliveryReport()

    notes: list = []  # said once at the start (e.g. a per-machine store for a multi-server job)

    def tell_stopping(self, server: str, reason: str) -> None:
        """This server's job stops: other servers without a job link learn it from the store."""

    def stop_requested(self, server: str) -> str | None:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
