"""What a job ended as: its status, one record per failed process, the root cause.

torchrun's ChildFailedError is the model: one record per failed process, the first one is the
root cause. Improvements: every rank is listed (including those the launcher stopped, marked as
consequences), the device and the last log lines of the root cause are kept, and the log folder
is named so the next step is obvious. The table users read is display/result_table.py.
"""
from __future__ import annotations

import dataclasses
import signal
from enum import Enum
from typing import Any

from platform_plugin.errors import PlatformPluginError
from platform_plugin.tracking.job.report import DeliveryReport

HELPERS = ("sched", "store")  # processes that are not ranks
# The MIME type under which `%dist_run` publishes `JobResult.to_dict()` in a cell's outputs: the
# notebook runner reads a failed rank's root cause from it (data, not the printed table).
JOB_RESULT_MIME = "application/vnd.platform-plugin.job-result+json"
# a failed rank's last lines travel in the cell (printed, and as data in the .ipynb), job.json
# and the run: a 5 MB line without a newline must not (the log keeps it whole)
LAST_LINE_CHARS = 500


class JobStatus(str, Enum):
    """How a job ended; the values are what job.json and MLflow record."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    HUNG = "hung"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:  # f"{status}" is the value on every Python version
        return self.value


def name_label(name: str) -> str:
    return name if name in HELPERS else f"rank {name}"


def describe_exit(exitcode: int | None) -> tuple[int | None, str | None]:
    """Popen.returncode -> (exit code, signal name); negative codes are signals."""
    if exitcode is None or exitcode >= 0:
        return exitcode, None
    try:
        return exitcode, signal.Signals(-exitcode).name
    except ValueError:
        return exitcode, f"signal {-exitcode}"


def how_it_ended(returncode: int) -> str:
    """The words of a process's end in the supervisor's note: "was killed by SIGKILL"."""
    code, sig = describe_exit(returncode)
    return f"was killed by {sig}" if sig else f"exited with code {code}"


def ended_by(returncode: int | None, sent: tuple[int, ...]) -> bool:
    """Did the process die of a signal the launcher had sent before its end was seen (killed
    by it, or exit 128+N: a shell that was)? Not a process that ended with its own exit code
    (a traceback a moment after the stop began), nor one killed by a signal the launcher did
    not send (the kernel's OOM SIGKILL, SIGSEGV, another user's kill -9)."""
    if not returncode:
        return False
    return -returncode in sent or (returncode > 128 and returncode - 128 in sent)


@dataclasses.dataclass
class RankFailure:
    """One process that failed: how, where, and its last lines. `name`: "0", "1", ... or
    "sched"; `exitcode`: Popen's convention (-N = killed by signal N; None = still running when
    stopped); `stopped_by_launcher`: it died of a signal the launcher had sent (`ended_by`);
    `after_signal`: the launcher's last signal to the job before its end was seen (None: it
    ended before the launcher sent any); `stack`: its innermost Python frames when stopped;
    `recorded`: what it wrote into TORCHELASTIC_ERROR_FILE (torch's `@record`): the exception's
    message and its innermost frame."""

    name: str
    rank_id: int | None
    device_id: int | None
    host: str
    pid: int | None
    exitcode: int | None
    signal_name: str | None
    runtime_s: float
    last_lines: list[str] = dataclasses.field(default_factory=list)
    root_cause: bool = False
    stopped_by_launcher: bool = False
    stack: list[str] = dataclasses.field(default_factory=list)
    after_signal: str | None = None
    recorded: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.last_lines = [_clipped(line) for line in self.last_lines]
        self.recorded = [_clipped(line) for line in self.recorded]

    @property
    def how(self) -> str:
        if self.signal_name:
            return self.signal_name
        if self.exitcode is None:
            return "still running"
        return f"exit {self.exitcode}"

    @property
    def label(self) -> str:
        return name_label(self.name)

    @property
    def note(self) -> str:
        """What the table says it was: labelled by what happened, not by when it was seen."""
        if self.root_cause:
            return "ROOT CAUSE"
        if self.stopped_by_launcher:
            return "stopped by launcher"
        if self.after_signal and self.signal_name is None:
            # an exit code of its own after the launcher's SIGTERM: its handler's, or a failure
            return f"ended after {self.after_signal}"
        return "failed later"  # its own exit code, or a signal from elsewhere (OOM's SIGKILL)


def _clipped(line: str) -> str:
    """Its start and its end (an error message often ends a line that a progress bar began)."""
    if len(line) <= LAST_LINE_CHARS:
        return line
    half = LAST_LINE_CHARS // 2
    # no count: the line may have been bounded before (the board keeps ~4 KiB of a 5 MB line)
    return f"{line[:half]} …(clipped: the whole line is in the log)… {line[-half:]}"


@dataclasses.dataclass
class JobResult:
    """How a job ended: status, exit codes, the root cause, the tracking report.

    exitcodes: rank name -> Popen returncode; tracking: set after the ranks ended; reason: why
    the launcher ended the job (timeout, silence, interrupt), if it did; held_back: lines not
    displayed, per rank; attempts: earlier failed attempts (--max-restarts), job_duration_s: the
    whole job's time then (duration_s is the last attempt's); job_file_error:
    job.json could not be written completely (a full disk); ended_well: a failed job's processes
    that exited 0, name -> [rank id, device id, pid, runtime s] (the table's "ok" rows)."""

    job_id: str
    job_name: str
    job_dir: str
    backend: str
    status: JobStatus
    ok: bool
    duration_s: float
    exitcodes: dict[str, int | None]
    failures: list[RankFailure] = dataclasses.field(default_factory=list)
    root_cause: RankFailure | None = None
    tracking: DeliveryReport | None = None
    reason: str = ""
    held_back: dict[str, int] = dataclasses.field(default_factory=dict)
    attempts: list[dict] = dataclasses.field(default_factory=list)
    server_id: str = "localhost"
    job_file_error: str = ""
    ended_well: dict[str, list] = dataclasses.field(default_factory=dict)
    job_duration_s: float | None = None  # every attempt's (--max-restarts); None: this one's

    @property
    def whole_duration_s(self) -> float:
        """The whole job's time, from the first attempt's start (restarts included)."""
        return self.duration_s if self.job_duration_s is None else self.job_duration_s

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (job.json, the notebook's result output)."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobResult:
        """The inverse of `to_dict` for what rendering needs (tracking stays out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["status"] = JobStatus(values["status"])
        values["failures"] = [_failure_from_dict(f) for f in data.get("failures") or []]
        cause = data.get("root_cause")
        values["root_cause"] = _failure_from_dict(cause) if cause else None
        values["tracking"] = None
        return cls(**values)


def _failure_from_dict(data: dict[str, Any]) -> RankFailure:
    names = {f.name for f in dataclasses.fields(RankFailure)}
    return RankFailure(**{k: v for k, v in data.items() if k in names})


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
