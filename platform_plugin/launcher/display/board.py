"""The live rank board: the notebook display of a job, one block redrawn in place.

`Board` is an `Output` (every byte still goes to the rank logs, unchanged) whose display is
not a stream of prefixed lines but a table redrawn at most `REFRESH_S` apart: one row per
process with its status, runtime, last step, last metric values (read from the rank's tracking
spool), steps/s and last output line, then the last `TAIL_LINES` lines of each rank with the
count held back. A chatty job costs the notebook one block, whatever it prints: the saved
.ipynb keeps only the final state of a display that was updated in place.

`publish(bundle)` receives {"text/plain": ..., "text/html": ...}; the magic passes one that
creates an IPython display handle on the first call and updates it afterwards. With
`stream_write` the prefixed lines are written there as well (`platform-run debug|full`: the
kernel's own stderr is the user's terminal, while the notebook gets the board).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from platform_plugin.launcher.display.board_render import (BoardView, RankRow, choose_metrics,
                                                            render_html, render_text)
from platform_plugin.launcher.display.board_colours import to_html
from platform_plugin.launcher.display.output import TAIL_LINES as TABLE_LINES, Output
from platform_plugin.launcher.display.screen_tail import ScreenTail, plain
from platform_plugin.launcher.processes.result import JobResult, describe_exit
from platform_plugin.launcher.processes.supervisor import Proc, Supervisor
from platform_plugin.launcher.display.spool_tail import SpoolTail

REFRESH_S = 0.5  # at most two redraws a second: each one is a message to the browser
TAIL_LINES = 4  # 8 ranks x 4 lines + the table fit one screen


class Board(Output):
    def __init__(self, publish: Callable[[dict], object], *,
                 stream_write: Callable[[str], object] | None = None, refresh_s: float = REFRESH_S,
                 tail_lines: int = TAIL_LINES, board_metrics: tuple = (),
                 **output_options: Any) -> None:
        super().__init__("all" if stream_write else "none", write=stream_write, **output_options)
        self.publish = publish
        self.board_metrics = board_metrics  # --board-metrics: the metrics column, as given
        self.refresh_s = refresh_s
        # each rank's ScreenTail (screen_tail.py) answers the failure table's quote and the board's
        # tail: as many lines as the table quotes, the board shows the last few
        self.tail_lines = max(tail_lines, TABLE_LINES)
        self.board_lines = tail_lines
        self.notes: list[str] = []
        self.lines: dict[str, int] = {}
        self.supervisor: Supervisor | None = None
        self.spools: SpoolTail | None = None
        self._drawn_at = 0.0
        self._opened_at = time.monotonic()
        self._names: list[str] = []
        self.final_bundle: dict | None = None
        self._last_bundle: dict | None = None
        self.outcome = ""  # how the job ended, once `ended()` knows it
        self.cause: str | None = None  # the root-cause rank: its last lines follow in the table
        self.ended_notes: dict[str, str] = {}  # process -> ROOT CAUSE, stopped by launcher, ...
        self.delivering = False  # the ranks ended; the launcher waits for tracking's delivery
        self.waiting = ""  # why the ranks are silent, shown until the first one writes

    # -- Output ---------------------------------------------------------------------------
    def open(self, name: str, log_path: str) -> None:
        super().open(name, log_path)
        self._names.append(name)
        self.lines[name] = 0

    def feed(self, name: str, data: bytes) -> None:
        super().feed(name, data)
        self.lines[name] += data.count(b"\n")

    def _screen(self, name: str) -> ScreenTail:
        return self._streams[name].screen

    def note(self, text: str) -> None:
        self.notes.append(text)
        if self._write is not None:
            super().note(text)

    def quiet_start(self, text: str) -> None:
        self.waiting = text  # on the board only while nothing came (then it would mislead)
        if self._write is not None:
            Output.note(self, text)

    def flush(self) -> None:
        super().flush()
        now = time.monotonic()
        if now - self._drawn_at >= self.refresh_s:
            self._drawn_at = now
            bundle = self.bundle()
            if bundle != self._last_bundle:  # an idle job sends nothing to the browser
                self._last_bundle = bundle
                self.publish(bundle)

    def close(self) -> None:
        """The ranks' last output and statuses; the title's outcome waits for `ended()` (the
        supervisor closes the output before it knows the result: a final title drawn here read
        "— ended" for an instant before "— succeeded")."""
        super().close()
        bundle = self.bundle()
        if bundle != self._last_bundle:
            self._last_bundle = bundle
            self.publish(bundle)

    # -- Supervisor observer ----------------------------------------------------------------
    def started(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.spools = SpoolTail(supervisor.plan.job_dir, supervisor.plan.attempt)

    def ended(self, result: JobResult) -> None:
        """The last redraw says how the job ended (the table below it says why)."""
        self.outcome = "succeeded" if result.ok else result.status.upper()
        cause = result.root_cause
        self.cause = cause.name if cause is not None and cause.last_lines else None
        # the board turns into the result: each failed process's row says what the table did
        self.ended_notes = {f.name: f.note for f in result.failures if f.note}
        self.final_bundle = self.bundle(final=True)
        self.publish(self.final_bundle)

    def waiting_for_tracking(self, waiting: bool) -> None:
        """The job ended but the cell still runs while the ranks' points are delivered: the
        title says so (else "succeeded" over a busy cell for seconds, unexplained)."""
        if waiting != self.delivering:
            self.delivering = waiting
            self.final_bundle = self.bundle(final=True)
            self.publish(self.final_bundle)

    # -- the view ---------------------------------------------------------------------------
    def bundle(self, final: bool = False) -> dict:
        view = self.view(final)
        return {"text/plain": render_text(view), "text/html": render_html(view)}

    def view(self, final: bool = False) -> BoardView:
        running: list[Any] = self.supervisor.procs if self.supervisor else []
        procs = {p.spec.name: p for p in running}
        if self.spools is not None:
            self.spools.refresh(n for n in self._names if n != "sched")
        metrics = self.spools.metrics if self.spools else {}
        now = time.monotonic()
        rows = []
        for name in self._names:
            proc = procs.get(name)
            found = metrics.get(name)
            screen = self._screen(name)
            tail = screen.raw()[-self.board_lines:]  # the last few of the table's quote's lines
            rows.append(RankRow(
                name=name, status=_status(proc) + (f" — {self.ended_notes[name]}"
                                                   if final and name in self.ended_notes else ""),
                runtime_s=((proc.ended or now) - proc.started) if proc else now - self._opened_at,
                step=found.step if found else None, metrics=dict(found.values) if found else {},
                steps_per_s=found.steps_per_s if found else None,
                curve_name=found.main if found else None,
                curve=found.main_curve() if found else [],
                lines=self.lines.get(name, 0) + (1 if screen.current else 0),
                tail=[plain(line) for line in tail], tail_html=[to_html(line) for line in tail],
                # the failure table below the board prints the root cause's last lines: once
                tail_block=not (final and name == self.cause)))
        plan = self.supervisor.plan if self.supervisor else None
        title = (f"job {plan.job_id} — backend {plan.backend}" if plan else "starting the job")
        if final and self.outcome:
            title += f" — {self.outcome}"
            if self.delivering:
                title += " — sending the metrics to tracking (the stop button ends this wait)"
        names = choose_metrics([m.counts for m in metrics.values()], self.board_metrics)
        waiting = [self.waiting] if self.waiting and not self._heard and not final else []
        return BoardView(title=title, rows=rows, notes=list(self.notes) + waiting,
                         log_dir=plan.job_dir if plan else "", final=final, metric_names=names)


def _status(proc: Proc | None) -> str:
    if proc is None:
        return "starting"
    code = proc.popen.returncode
    if proc.ended is None or code is None:
        return "running"
    if code == 0:
        return "ok"
    exitcode, sig = describe_exit(code)
    return sig or f"exit {exitcode}"
