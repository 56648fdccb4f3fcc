"""What a job without tracking needs of it: the delivery report (`DeliveryReport`, empty) and
the no-op job handle (`Untracked`, the base of handle.JobTracking). A `--tracking none` launch
loads only this module of tracking's launcher side: the choice of a sink and the checks of a
store (handle.py) and everything that delivers (job_tracking.py) are not compiled.
"""
from __future__ import annotations

from platform_plugin.util.record import Record
from platform_plugin.variables import tracking_off

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from platform_plugin.tracking.job.views import ResultView


def compare_hint(job_id: str, notebook: bool = False) -> str:
    """How to compare the ranks of a job delivered to MLflow: in a terminal the command, in a
    notebook the magic that shows the table, the chart and the MLflow page in the cell."""
    return f"%dist_compare {job_id}" if notebook else f"platform-run compare {job_id} --url"


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
        from platform_plugin.tracking.job.handle import wait_for_helper  # (a tracked job's)
        return wait_for_helper(self, timeout)


class Untracked:
    """Tracking switched off: every step is a no-op, so the launcher never branches."""

    sink = "none"

    def prepare(self) -> dict[str, str]:
        return tracking_off()

    def start(self) -> None:
        pass

    def started(self, supervisor=None) -> None:
        """Supervisor observer: the ranks are running."""
        self.start()

    def finish(self, result: ResultView, last: bool = True, waiting=None,
               gone=()) -> DeliveryReport:
        """End.json, then wait for delivery up to the drain deadline. `waiting()` is called once
        if that wait is not over at once (the launcher records the ranks' end in job.json then,
        instead of always writing it one more time). `gone`: servers of the job whose launcher
        vanished; this one reports their end on the parent run for them."""
        return DeliveryReport()

    notes: list = []  # said once at the start (e.g. a per-machine store for a multi-server job)

    def tell_stopping(self, server: str, reason: str) -> None:
        """This server's job stops: other servers without a job link learn it from the store."""

    def stop_requested(self, server: str) -> str | None:
        return None

