"""One process of a failed job: `RankFailure` (how, where, its last lines), `describe_exit`,
`ended_by`. Loaded only when a job has failures, or a reader (the failure table, the notebook
runner, the board) asks: a job that succeeds never compiles it (result.py re-exports the names).
"""
from __future__ import annotations

import signal

from platform_plugin.launcher.processes.result import name_label
from platform_plugin.util.record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

# a failed rank's last lines travel in the cell (printed, and as data in the .ipynb), job.json
# and the run: a 5 MB line without a newline must not (the log keeps it whole)
LAST_LINE_CHARS = 500


def describe_exit(exitcode: int | None) -> tuple[int | None, str | None]:
    """Popen.returncode -> (exit code, signal name); negative codes are signals."""
    if exitcode is None or exitcode >= 0:
        return exitcode, None
    try:
        return exitcode, signal.Signals(-exitcode).name
    except ValueError:
        return exitcode, f"signal {-exitcode}"


class RankFailure(Record):
    """One process that failed: how, where, and its last lines. `name`: "0", "1", ... or
    "sched"; `exitcode`: Popen's convention (-N = killed by signal N; None = still running when
    stopped); `stopped_by_launcher`: it died of a signal the launcher had sent (`ended_by`);
    `after_signal`: the launcher's last signal to the job before its end was seen (None: it
    ended before the launcher sent any); `stack`: its innermost Python frames when stopped."""

    __slots__ = ("name", "rank_id", "device_id", "host", "pid", "exitcode", "signal_name",
                 "runtime_s", "last_lines", "root_cause", "stopped_by_launcher", "stack",
                 "after_signal")

    def __init__(self, name: str, rank_id: int | None, device_id: int | None, host: str,
                 pid: int | None, exitcode: int | None, signal_name: str | None,
                 runtime_s: float, last_lines: list[str] | None = None, root_cause: bool = False,
                 stopped_by_launcher: bool = False, stack: list[str] | None = None,
                 after_signal: str | None = None) -> None:
        self.name, self.rank_id, self.device_id, self.host = name, rank_id, device_id, host
        self.pid, self.exitcode, self.signal_name = pid, exitcode, signal_name
        self.runtime_s = runtime_s
        self.last_lines = [] if last_lines is None else [_clipped(line) for line in last_lines]
        self.root_cause, self.stopped_by_launcher = root_cause, stopped_by_launcher
        self.stack = [] if stack is None else stack
        self.after_signal = after_signal

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


def failure_from_dict(data: dict[str, Any]) -> RankFailure:
    return RankFailure(**{k: v for k, v in data.items() if k in RankFailure.__slots__})


def failure_dict(failure: RankFailure) -> dict[str, Any]:
    data = failure.as_dict()
    data["last_lines"], data["stack"] = list(failure.last_lines), list(failure.stack)
    return data

def _clipped(line: str) -> str:
    """Its start and its end (an error message often ends a line that a progress bar began)."""
    if len(line) <= LAST_LINE_CHARS:
        return line
    half = LAST_LINE_CHARS // 2
    # no count: the line may have been bounded before (the board keeps ~4 KiB of a 5 MB line)
    return f"{line[:half]} …(clipped: the whole line is in the log)… {line[-half:]}"
