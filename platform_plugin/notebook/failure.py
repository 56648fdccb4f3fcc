"""How a notebook run fails, read from papermill and nbclient.

papermill records a failed cell when nbclient raises CellExecutionError. Three failures slip
past that: a cell timeout (nbclient's CellTimeoutError is not a CellExecutionError, so
papermill marks the cell "completed"), a kernel that dies, and a rank that fails inside
`%dist_run` (a cell error like any other, but its explanation — the launcher's root-cause
table — is in the cell's output, not in the error). `CellWatcher` (nbclient hooks) and the
functions below turn each into a `CellFailure` and leave the output notebook saying so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT_ENAME = "CellTimeoutError"  # the error a timed-out cell is recorded with
RANK_FAILURE_ENAMES = ("JobFailed",)  # platform_plugin.launch's error when a rank fails
# After a timeout the kernel is interrupted; give %dist_run time to stop its ranks
# (SIGTERM, grace, SIGKILL) and report before the kernel is shut down.
INTERRUPT_GRACE_S = 30


@dataclass(frozen=True)
class CellFailure:
    kind: str  # "error" | "rank" | "timeout" | "kernel"
    cell_index: int  # 0-based index in the notebook that ran
    execution_count: int | None
    source: str
    ename: str
    evalue: str
    traceback: tuple[str, ...] = ()
    rank_table: str = ""  # the launcher's root-cause table (JobResult.render()), rank failures


class CellWatcher:
    """nbclient hooks: prints a marker per cell and records which cell timed out.

    papermill leaves a timed-out cell marked "completed" (nbclient's CellTimeoutError is
    not a CellExecutionError). We ask nbclient to interrupt the kernel on timeout and to
    answer with a sentinel error, then record it in the cell so the notebook and the exit
    code both say the run failed."""

    def __init__(self, timeout: int | None, stream):
        self.timeout = timeout
        self.stream = stream
        self.current_index: int | None = None
        self.timed_out_index: int | None = None
        self.failed_outputs: list = []  # outputs of the cell that raised

    def engine_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"on_cell_start": self.on_cell_start,
                                   "on_cell_error": self.on_cell_error}
        if self.timeout:
            options.update(
                execution_timeout=self.timeout, interrupt_on_timeout=True,
                iopub_timeout=INTERRUPT_GRACE_S,
                error_on_timeout={"ename": TIMEOUT_ENAME, "evalue": self.timeout_message(),
                                  "traceback": [f"{TIMEOUT_ENAME}: {self.timeout_message()}"]})
        return options

    def timeout_message(self) -> str:
        return f"the cell ran longer than --timeout {self.timeout}s; the kernel was interrupted"

    def on_cell_start(self, cell, cell_index: int, **_: Any) -> None:
        self.current_index = cell_index
        if self.stream and cell.cell_type == "code":
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            print(f"[platform-run] cell {cell_index + 1}: {first[:70]}", file=self.stream,
                  flush=True)

    def on_cell_error(self, cell, cell_index: int, execute_reply: dict, **_: Any) -> None:
        self.failed_outputs = list(cell.get("outputs", []))
        if execute_reply.get("content", {}).get("ename") == TIMEOUT_ENAME:
            self.mark_timed_out(cell, cell_index)

    def mark_timed_out(self, cell, cell_index: int) -> None:
        import nbformat

        self.timed_out_index = cell_index
        if any(o.get("ename") == TIMEOUT_ENAME for o in cell.get("outputs", [])):
            return
        # before any KeyboardInterrupt the interrupt produced, so it is the error papermill reports
        first_error = next((i for i, o in enumerate(cell.outputs) if o.output_type == "error"),
                           len(cell.outputs))
        cell.outputs.insert(first_error, nbformat.v4.new_output(
            "error", ename=TIMEOUT_ENAME, evalue=self.timeout_message(),
            traceback=[f"{TIMEOUT_ENAME}: {self.timeout_message()}"]))


def escaped_failure_kind(exc: BaseException) -> str | None:
    """nbclient errors that papermill does not turn into a failed cell."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    if isinstance(exc, CellTimeoutError):  # e.g. the kernel ignored the interrupt
        return "timeout"
    return "kernel" if isinstance(exc, DeadKernelError) else None


def record_escaped_failure(output: Path, watcher: CellWatcher, exc: BaseException) -> CellFailure:
    """The kernel did not answer the interrupt (or died): papermill raised past its own
    error handling. Record the failure in the saved notebook the way papermill would."""
    import nbformat
    from papermill.exceptions import PapermillExecutionError
    from papermill.execute import raise_for_execution_errors

    nb = nbformat.read(output, as_version=4)
    index = watcher.timed_out_index if watcher.timed_out_index is not None else (
        watcher.current_index or 0)
    cell = nb.cells[index]
    if watcher.timed_out_index is not None:
        watcher.mark_timed_out(cell, index)
    else:
        cell.outputs.append(nbformat.v4.new_output(
            "error", ename=type(exc).__name__, evalue=str(exc) or "the kernel died",
            traceback=[f"{type(exc).__name__}: {exc}"]))
    cell.metadata.setdefault("papermill", {}).update(status="failed", exception=True)
    for later in nb.cells[index + 1:]:  # papermill marked them "completed" on its way out
        if "papermill" in later.metadata and not later.metadata.papermill.get("start_time"):
            later.metadata.papermill["status"] = "pending"
    nb.metadata.setdefault("papermill", {})["exception"] = True
    try:
        raise_for_execution_errors(nb, str(output))
    except PapermillExecutionError as error:
        return failure_from(error, watcher, kind=None if watcher.timed_out_index is not None
                             else "kernel")
    raise exc  # pragma: no cover - the error output above always makes papermill raise


def failure_from(error, watcher: CellWatcher, kind: str | None = None) -> CellFailure:
    if kind is None:
        if error.ename == TIMEOUT_ENAME or watcher.timed_out_index == error.cell_index:
            kind = "timeout"
        elif error.ename in RANK_FAILURE_ENAMES:
            kind = "rank"
        else:
            kind = "error"
    table = rank_table(error.evalue, watcher.failed_outputs) if kind == "rank" else ""
    return CellFailure(kind, error.cell_index, error.exec_count, error.source, error.ename,
                       error.evalue, tuple(error.traceback or ()), table)


def rank_table(message: str, outputs: list) -> str:
    """The root-cause table of a failed `%dist_run`. JobFailed's message names the job
    ("job <id> failed: rank 1 exit 3 (logs: ...)"); `%dist_run` printed the table
    (JobResult.render(), headed "job <id> FAILED after ...", ending with "  logs: ...")
    into the cell's output just before raising. Falls back to the message itself."""
    if "\n" in message.strip():
        return message  # the message carries the table
    match = re.match(r"job (\S+) ", message)
    if not match:
        return message
    for stream in ("stdout", "stderr"):
        text = "".join(o.get("text", "") for o in outputs
                       if o.get("output_type") == "stream" and o.get("name") == stream)
        start = text.rfind(f"job {match.group(1)} ")
        if start >= 0:
            block = text[start:].splitlines()
            end = next((i for i, line in enumerate(block) if line.startswith("  logs:")),
                       len(block) - 1)
            return "\n".join(block[:end + 1])
    return message
