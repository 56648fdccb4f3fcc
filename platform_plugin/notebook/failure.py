"""How a notebook run fails, read from papermill and nbclient.

papermill records a failed cell when nbclient raises CellExecutionError. Three failures slip
past that: a cell timeout (nbclient's CellTimeoutError is not a CellExecutionError, so
papermill marks the cell "completed"), a kernel that dies, and a rank that fails inside
`%dist_run` (a cell error like any other, but its explanation — the launcher's JobResult —
is published as data in the cell's outputs under JOB_RESULT_MIME). `CellWatcher` (nbclient
hooks) and the functions below turn each into a `CellFailure` and leave the output notebook
saying so; `CellFailure.render()` is the report the CLI prints.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from platform_plugin.launcher.display.result_table import clip, render_result
from platform_plugin.launcher.processes.result import JOB_RESULT_MIME, JobResult

TIMEOUT_ENAME = "CellTimeoutError"  # the error a timed-out cell is recorded with
RANK_FAILURE_ENAMES = ("JobFailed",)  # platform_plugin.launch's error when a rank fails
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SOURCE_LINES = 15  # of the failed cell, in the report
# After a timeout the kernel is interrupted; give %dist_run time to stop its ranks
# (SIGTERM, grace, SIGKILL) and report before the kernel is shut down.
INTERRUPT_GRACE_S = 30


class FailureKind(str, Enum):
    ERROR = "error"  # the cell raised
    RANK = "rank"  # a rank failed inside %dist_run (JobFailed)
    TIMEOUT = "timeout"  # the cell ran longer than --timeout
    KERNEL = "kernel"  # the kernel died

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CellFailure:
    kind: FailureKind
    cell_index: int  # 0-based index in the notebook that ran
    execution_count: int | None
    source: str
    ename: str
    evalue: str
    traceback: tuple[str, ...] = ()
    job: JobResult | None = None  # the failed %dist_run job, read from the cell's outputs

    def render(self, *, colors: bool = False, width: int | None = None) -> str:
        """What the CLI prints: where it failed, the cell's first lines, and why (for a failed
        rank: the launcher's own root-cause table, `render_result`). `width`: the
        terminal's columns; the cell's lines and the rank table fit them as `platform-run
        launch`'s table does (a traceback stays whole: it is what a Python user reads)."""
        where = f"cell {self.cell_index + 1}" + (
            f" (In [{self.execution_count}])" if self.execution_count else "")
        headline = {
            FailureKind.TIMEOUT: f"notebook FAILED: {where} timed out",
            FailureKind.RANK: f"notebook FAILED: a rank failed in {where}",
            FailureKind.KERNEL: f"notebook FAILED: the kernel died in {where}",
        }.get(self.kind, f"notebook FAILED in {where}: {self.ename}")
        source = "\n".join(clip(f"  | {line}", width)
                           for line in self.source.splitlines()[:SOURCE_LINES])
        detail = f"{self.ename}: {self.evalue}"
        if self.kind == FailureKind.ERROR and self.traceback:
            detail = "\n".join(self.traceback)
        elif self.kind == FailureKind.RANK and self.job is not None:  # its logs: in the table
            detail = clip(detail, width) + "\n" + render_result(self.job, width)
        if not colors:  # IPython colours tracebacks; keep the colours only on a terminal
            detail = ANSI.sub("", detail)
        return f"[platform-run] {headline}\n{source}\n{detail}"


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
        self.exited_at: int | None = None  # a cell that called sys.exit(0): the run ends there

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
        content = execute_reply.get("content", {})
        if content.get("ename") == "SystemExit" and content.get("evalue") in ("", "0"):
            self.exited_at = cell_index  # papermill's early stop: a success, later cells skipped
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


def escaped_failure_kind(exc: BaseException) -> FailureKind | None:
    """nbclient errors that papermill does not turn into a failed cell."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    if isinstance(exc, CellTimeoutError):  # e.g. the kernel ignored the interrupt
        return FailureKind.TIMEOUT
    return FailureKind.KERNEL if isinstance(exc, DeadKernelError) else None


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
                             else FailureKind.KERNEL)
    raise exc  # pragma: no cover - the error output above always makes papermill raise


def failure_from(error, watcher: CellWatcher, kind: FailureKind | None = None) -> CellFailure:
    if kind is None:
        if error.ename == TIMEOUT_ENAME or watcher.timed_out_index == error.cell_index:
            kind = FailureKind.TIMEOUT
        elif error.ename in RANK_FAILURE_ENAMES:
            kind = FailureKind.RANK
        else:
            kind = FailureKind.ERROR
    job = job_result(watcher.failed_outputs) if kind == FailureKind.RANK else None
    return CellFailure(kind, error.cell_index, error.exec_count, error.source, error.ename,
                       error.evalue, tuple(error.traceback or ()), job)


def job_result(outputs: list) -> JobResult | None:
    """The JobResult `%dist_run` published in the cell's outputs (the last one: a cell may run
    several jobs, and the one that failed raised, so nothing ran after it)."""
    for output in reversed(outputs):
        data = output.get("data", {}) if output.get("output_type") == "display_data" else {}
        if JOB_RESULT_MIME in data:
            return JobResult.from_dict(data[JOB_RESULT_MIME])
    return None
