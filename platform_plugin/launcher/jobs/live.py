"""What a user sees of a job their own process does not supervise, all from its folder
(follow.py): the board of a background job in the cell that started it (a thread of the kernel:
the cell returned, the kernel is free), `%dist_attach` (the attaching cell, until the job ends
or the stop button detaches), `platform-run attach` (the terminal: the board once, then the
ranks' new lines, then the result). The board is the one the foreground job shows
(board_render.py); the ended job's result block (the root-cause table of a failure) is the one
its launcher printed (watch.job_summary).
"""
from __future__ import annotations

import contextvars
import html
import os
import sys
import threading
import time
from typing import IO, Callable

from platform_plugin.launcher.display.board_render import render_html, render_text
from platform_plugin.launcher.display.screen_tail import plain
from platform_plugin.launcher.jobs.follow import LAUNCHER, JobFollower
from platform_plugin.launcher.jobs.records import JobRecord
from platform_plugin.launcher.processes.result import name_label
from platform_plugin.launcher.job import job_summary
from platform_plugin.util.stops import INTERRUPTED_EXIT

REFRESH_S = 0.5  # as the foreground board: at most two redraws a second
EXIT_CODES = {"succeeded": 0, "interrupted": INTERRUPTED_EXIT}  # else 1 (failed, lost)
DETACHED = " — detached: the job goes on"


def result_text(record: JobRecord, board: bool = False) -> str:
    """The ended job's block: its launcher's summary (a failure's root-cause table), or what is
    known of a lost one. `board`: below its final board (which shows each process's end)."""
    result = record.result()
    if result is not None:
        return job_summary(result, board=board)
    if record.state == "lost":
        pid = record.launcher.get("pid")
        return (f"[launcher] job {record.job_id} was lost: its launcher (pid {pid}) ended "
                "without writing a result (killed?); its ranks were stopped by its lifeline. "
                f"The logs are in {record.job_dir}")
    return ""


def bundle(follower: JobFollower, *, final: bool = False, note: str = "") -> dict:
    view = follower.view(final=final, title_note=note)
    text, page = render_text(view), render_html(view)
    record = follower.record
    block = result_text(record, board=True) if final and record is not None else ""
    if block:
        text += "\n" + block
        page += f"<pre style='margin:4px 0'>{html.escape(block)}</pre>"
    return {"text/plain": text, "text/html": page}


class LiveBoard:
    """The board of the job in `job_dir`, published with `publish(bundle)` (an IPython display
    handle: created, then updated in place) every REFRESH_S until the job ended."""

    def __init__(self, job_dir: str, publish: Callable[[dict], object],
                 refresh_s: float = REFRESH_S) -> None:
        self.follower = JobFollower(job_dir)
        self.publish = publish
        self.refresh_s = refresh_s
        self.stopped = threading.Event()
        self._last: dict | None = None
        self.record: JobRecord | None = None

    def step(self) -> bool:
        """One refresh; True once the job ended (its last board published)."""
        record, _ = self.follower.refresh()
        self.record = record
        ended = not record.running
        self._show(bundle(self.follower, final=ended))
        return ended

    def follow(self) -> JobRecord:
        """Refresh until the job ended (or `stopped` is set); the last record."""
        while not self.step():
            if self.stopped.wait(self.refresh_s):
                break
        assert self.record is not None
        return self.record

    def detach(self) -> None:
        self._show(bundle(self.follower, note=DETACHED))

    def in_thread(self) -> threading.Thread:
        """Follow from a thread of this process (the kernel's: the cell returned). It runs in
        a copy of the caller's context: ipykernel keeps the cell's message there, which the
        display updates answer."""
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(self._follow_quietly,), daemon=True,
                                  name="platform-job-board")
        thread.start()
        return thread

    def _follow_quietly(self) -> None:
        try:
            self.follow()
        except Exception as exc:  # noqa: BLE001 - a board must never raise in a kernel thread
            self._show({"text/plain": f"[launcher] the board stopped: {exc}"})

    def _show(self, data: dict) -> None:
        if data != self._last:  # an idle job sends nothing to the browser
            self._last = data
            self.publish(data)


def attach_terminal(job_dir: str, out: IO[str] | None = None,
                    refresh_s: float = REFRESH_S) -> int:
    """`platform-run attach`: the board as text, then each rank's new lines prefixed as a
    foreground launch shows them, then the final board and the result. Ctrl-C detaches. The
    exit status is the job's: 0 succeeded, 1 failed or lost, 130 interrupted."""
    out = out or sys.stdout
    follower = JobFollower(job_dir)
    record, _ = follower.refresh()
    try:
        if record.running:
            _write(out, bundle(follower)["text/plain"])
        while record.running:
            time.sleep(refresh_s)
            if not os.path.isdir(job_dir):
                _write(out, f"[attach] the job folder {job_dir} was removed: nothing more to "
                       "follow")
                return 1
            record, new = follower.refresh()
            if not record.running:  # the launcher's summary comes below its last board
                new.pop(LAUNCHER, None)
            _write_lines(out, new)
    except KeyboardInterrupt:
        _write(out, f"[attach] detached from job {record.job_id}: it goes on (`platform-run "
               f"attach {record.job_id}` follows it again, `platform-run stop {record.job_id}` "
               "stops it)")
        return 0
    _write(out, bundle(follower, final=True)["text/plain"])
    return EXIT_CODES.get(record.state, 1)


def _write_lines(out: IO[str], new: dict[str, list[bytes]]) -> None:
    lines = []
    for name, added in new.items():
        prefix = "" if name == LAUNCHER else f"[{name_label(name)}] "
        lines += [prefix + plain(line) for line in added]
    if lines:
        _write(out, "\n".join(lines))


def _write(out: IO[str], text: str) -> None:
    out.write(text + "\n")
    out.flush()
