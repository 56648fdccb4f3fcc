"""What the launcher keeps of a job's tracking: the delivery report (`DeliveryReport`) and the
no-op job handle (`Untracked`, the base of handle.JobTracking) that a `--tracking none` job uses.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Sequence

from platform_plugin.tracking.job.views import ResultView
from platform_plugin.tracking.shared.state import HelperStatus, SinkConfig
from platform_plugin.variables import tracking_off


def compare_hint(job_id: str, notebook: bool = False) -> str:
    """How to compare the ranks of a job delivered to MLflow: in a terminal the command, in a
    notebook the magic that shows the table, the chart and the MLflow page in the cell."""
    return f"%dist_compare {job_id}" if notebook else f"platform-run compare {job_id} --url"


@dataclasses.dataclass
class DeliveryReport:
    """What tracking delivered for a job, what still waits, and why. skipped: spool lines that
    were not records (a rank killed mid-write); rejected: records the sink refused for good;
    refused: records the tracker refused in the rank (over MLflow's size limits); quarantined:
    spool lines too large to deliver, kept in rank_<N>.jsonl.quarantine."""

    sink: str = "none"
    delivered: int = 0
    pending: int = 0
    reason: str = ""
    parent_run_id: str | None = None
    ui_hint: str = ""
    skipped: int = 0
    rejected: int = 0
    spool_dir: str = ""
    refused: int = 0
    quarantined: int = 0

    def wait_ended(self, timeout: float = 120.0) -> bool:
        """Wait until the forwarding helper has finished (runs ended, or left open for sync):
        for tests and scripts that read the runs right after `launch()`. Refreshes the report
        (parent_run_id)."""
        if not self.spool_dir:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = HelperStatus.load(self.spool_dir)
            if status is not None and (status.phase == "done" or not _alive(status.pid)):
                break
            time.sleep(0.05)
        else:
            return False
        self.parent_run_id = (SinkConfig.load(self.spool_dir) or SinkConfig("")).parent_run_id
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Untracked:
    """Tracking switched off: every step is a no-op, so the launcher never branches."""

    sink = "none"
    notes: list = []  # said once at the start (e.g. a per-machine store for a multi-server job)

    def prepare(self) -> dict[str, str]:
        return tracking_off()

    def start(self) -> None:
        pass

    def started(self, supervisor: Any = None) -> None:
        """Supervisor observer: the ranks are running."""
        self.start()

    def check_store(self, say: Callable[[str], None]) -> None:
        """Check the tracking server from a thread; `say(message)` when it will not take the
        job's points (credentials, unreachable, permission), and keep watching the delivery
        while the ranks run: a store that stops taking the points mid-job is said then, not
        only at the end. Nothing to check here."""

    def finish(self, result: ResultView | None, last: bool = True, waiting: Callable[[], object] | None = None,
               gone: Sequence[str] = (), launcher_bytes: dict[str, int] | None = None) -> DeliveryReport:
        """End.json, then wait for delivery up to the drain deadline. `waiting()` is called once
        if that wait is not over at once (the launcher records the ranks' end in job.json then,
        instead of always writing it one more time). `gone`: servers of the job whose launcher
        vanished; this one reports their end on the parent run for them."""
        return DeliveryReport()
