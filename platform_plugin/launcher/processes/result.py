"""What a job ended as: per-rank failures, the root cause, and the table users read.

torchrun's ChildFailedError is the model: one record per failed process, the first one is the
root cause. Improvements: every rank is listed (including those the launcher stopped, marked as
consequences), the device and the last log lines of the root cause are shown, and the log folder
is named so the next step is obvious.
"""
from __future__ import annotations

from enum import Enum

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)

from platform_plugin.errors import PlatformPluginError
from platform_plugin.util.record import Record

HELPERS = ("sched", "store")  # processes that are not ranks (output.HELPER_NAMES)
if TYPE_CHECKING:
    from typing import Any

    from platform_plugin.launcher.processes.rank_failure import RankFailure
    from platform_plugin.tracking.job.handle import DeliveryReport
# A failed process's record (RankFailure, describe_exit, ended_by: launcher/processes/rank_failure.py) is
# loaded only when a job has failures or a reader asks for it: a job that succeeds never
# compiles it. The names are still importable from here (module __getattr__ below).
_FAILURE_NAMES = ("RankFailure", "describe_exit", "ended_by", "LAST_LINE_CHARS")

# The MIME type under which `%dist_run` publishes `JobResult.to_dict()` in a cell's outputs: the
# notebook runner reads a failed rank's root cause from it (data, not the printed table).
JOB_RESULT_MIME = "application/vnd.platform-plugin.job-result+json"


class JobStatus(str, Enum):
    """How a job ended; the values are what job.json and MLflow record."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    HUNG = "hung"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:  # f"{status}" is the value on every Python version
        return self.value


STATUSES = tuple(s.value for s in JobStatus)


class JobResult(Record):
    """How a job ended: status, exit codes, the root cause, the tracking report.

    exitcodes: rank name -> Popen returncode; tracking: set after the ranks ended; reason: why
    the launcher ended the job (timeout, silence, interrupt), if it did; held_back: lines not
    displayed, per rank; attempts: earlier failed attempts (--max-restarts); job_file_error:
    job.json could not be written completely (a full disk); ended_well: a failed job's processes
    that exited 0, name -> [rank id, device id, pid, runtime s] (the table's "ok" rows)."""

    __slots__ = ("job_id", "job_name", "job_dir", "backend", "status", "ok", "duration_s",
                 "exitcodes", "failures", "root_cause", "tracking", "reason", "held_back",
                 "attempts", "server_id", "job_file_error", "ended_well")

    def __init__(self, job_id: str, job_name: str, job_dir: str, backend: str,
                 status: JobStatus, ok: bool, duration_s: float,
                 exitcodes: dict[str, int | None], failures: list[RankFailure] | None = None,
                 root_cause: RankFailure | None = None, tracking: DeliveryReport | None = None,
                 reason: str = "", held_back: dict[str, int] | None = None,
                 attempts: list[dict] | None = None, server_id: str = "localhost",
                 job_file_error: str = "", ended_well: dict[str, list] | None = None) -> None:
        self.job_id, self.job_name, self.job_dir, self.backend = job_id, job_name, job_dir, backend
        self.status, self.ok, self.duration_s, self.exitcodes = status, ok, duration_s, exitcodes
        self.failures = [] if failures is None else failures
        self.root_cause, self.tracking, self.reason = root_cause, tracking, reason
        self.held_back = {} if held_back is None else held_back
        self.attempts = [] if attempts is None else attempts
        self.server_id, self.job_file_error = server_id, job_file_error
        self.ended_well = {} if ended_well is None else ended_well

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (job.json, the notebook's result output), as dataclasses.asdict
        would (containers copied)."""
        data = self.as_dict()
        data["status"] = self.status.value
        data["exitcodes"] = dict(self.exitcodes)
        data["failures"], data["root_cause"] = [], None
        if self.failures or self.root_cause:
            from platform_plugin.launcher.processes.rank_failure import failure_dict
            data["failures"] = [failure_dict(f) for f in self.failures]
            data["root_cause"] = failure_dict(self.root_cause) if self.root_cause else None
        data["tracking"] = None if self.tracking is None else self.tracking.as_dict()
        data["held_back"] = dict(self.held_back)
        data["attempts"] = [dict(a) for a in self.attempts]
        data["ended_well"] = {k: list(v) for k, v in self.ended_well.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobResult:
        """The inverse of `to_dict` for what rendering needs (tracking stays a plain dict)."""
        values = {k: v for k, v in data.items() if k in cls.__slots__}
        values["status"] = JobStatus(values["status"])
        from platform_plugin.launcher.processes.rank_failure import failure_from_dict
        values["failures"] = [failure_from_dict(f) for f in data.get("failures") or []]
        cause = data.get("root_cause")
        values["root_cause"] = failure_from_dict(cause) if cause else None
        values["tracking"] = None
        return cls(**values)

    def render(self, width: int | None = None) -> str:
        """A compact table: one headline, the root cause with its last lines, one row per rank
        (launcher/display/result_table.py: only a failed job needs it); `width`: a terminal's columns."""
        from platform_plugin.launcher.display.result_table import render
        return render(self, width)


class JobFailed(PlatformPluginError):
    """A rank (or the scheduler) failed, or the job was stopped; `.result` holds the details."""

    exit_code = 1

    def __init__(self, result: JobResult):
        self.result = result
        cause = result.root_cause
        status = f"{result.status}"
        what = f"{cause.label} {cause.how}" if cause else (result.reason or status)
        # "job x interrupted (Ctrl-C, ...)", not "job x interrupted: interrupted (Ctrl-C, ...)"
        head = f"job {result.job_id} " + (what if what.startswith(status) else f"{status}: {what}")
        super().__init__(f"{head} (logs: {result.job_dir})")


def name_label(name: str) -> str:
    return name if name in HELPERS else f"rank {name}"


def __getattr__(name: str) -> Any:
    if name not in _FAILURE_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from platform_plugin.launcher.processes import rank_failure
    return getattr(rank_failure, name)
