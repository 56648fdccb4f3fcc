"""A job followed from its folder, by a process that is not its launcher: the board of a
background job, `%dist_attach`, `platform-run attach`.

Everything comes from the files the launcher writes anyway: job.json (the ranks, their pids,
the result), `rank_N.log` (the lines), the tracking spools (the metrics, as the live board reads
them: spool_tail.py). Reads are incremental: a log is first read from its end (its last
FIRST_READ bytes: the board's tail, however long the log), then only what was added; a log cut
short or replaced (a restarted attempt moves the logs into attempt-N/) is read from its new
start. The metrics are the current attempt's (job.json's `attempt`: its spools, `tracking/` or
`tracking-attempt-K/`), as the foreground board shows them: when a restart's job.json says
attempt K, the board leaves the earlier attempt's spools for K's, read from their start.
job.json is read again only when it changed. Nothing here raises for a folder that is
half-written or removed meanwhile: what is missing is shown as missing.
"""
from __future__ import annotations

import os
import time

from platform_plugin.launcher.display.board_colours import to_html
from platform_plugin.launcher.display.board_render import BoardView, RankRow, choose_metrics
from platform_plugin.launcher.display.screen_tail import plain
from platform_plugin.launcher.display.output import TAIL_LINES as TABLE_LINES
from platform_plugin.launcher.display.screen_tail import ScreenTail
from platform_plugin.launcher.display.spool_tail import SpoolTail
from platform_plugin.launcher.jobs.records import JobRecord, read_record
from platform_plugin.launcher.processes.result import describe_exit
from platform_plugin.util.jobdirs import JOB_FILE, log_name
from platform_plugin.util.procfs import alive

FIRST_READ = 64 * 1024  # a log's first read, from its end: the last lines of any log
# a log's lines before its first read are counted when they are at most this long (a bounded
# read, in COUNT_CHUNK pieces: 8 ranks cost at most 16 MiB); a longer log's size is said instead
COUNT_LIMIT = 2 << 20
COUNT_CHUNK = 1 << 20
READ_LIMIT = 4 << 20  # per refresh; a log that grew more is read from its end again
BOARD_LINES = 4
OUTPUT_NAME = "launcher.out"  # a background job's launcher output (child.py)
LAUNCHER = ""  # refresh()'s key of the launcher's own new lines (launcher.out)


class LogTail:
    """One rank log followed from its end: its last lines as a terminal shows them, its lines
    (the ones before its first read counted up to COUNT_LIMIT bytes; `lines` is None past that:
    then `size` says how much it holds), and the complete lines added since the last read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.inode: int | None = None
        self.lines: int | None = 0
        self.size = 0
        self.screen = ScreenTail(TABLE_LINES)
        self._partial = b""

    def read(self) -> list[bytes]:
        """Read what was added; returns the complete lines among it."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if st.st_ino != self.inode or st.st_size < self.offset:  # new or replaced log
                self.inode, self.offset, self.lines = st.st_ino, 0, 0
                self.screen, self._partial = ScreenTail(TABLE_LINES), b""
            self.size = st.st_size
            if st.st_size == self.offset:
                return []
            start = self.offset
            if st.st_size - start > (FIRST_READ if start == 0 else READ_LIMIT):
                start = st.st_size - FIRST_READ  # from the end; the lines skipped are counted
                skipped = None if self.lines is None else count_lines(fd, self.offset, start)
                self.lines = None if self.lines is None or skipped is None else \
                    self.lines + skipped
                self._partial = b""
            data = os.pread(fd, st.st_size - start, start)
        except OSError:
            return []
        finally:
            os.close(fd)
        if self.lines is not None:
            self.lines += data.count(b"\n")
        if start != self.offset and b"\n" in data:
            data = data[data.index(b"\n") + 1:]  # the first line read was cut: leave it out
        self.offset = start + len(data) if start == self.offset else self.size
        self.screen.feed(data)
        data, self._partial = self._partial + data, b""
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = data
            return []
        self._partial = data[cut + 1:]
        return data[:cut].split(b"\n")


def count_lines(fd: int, start: int, end: int) -> int | None:
    """The line ends between `start` and `end` of an open log, read in COUNT_CHUNK pieces; None
    when that is more than COUNT_LIMIT bytes (or the log was cut meanwhile)."""
    if end - start > COUNT_LIMIT:
        return None
    count = 0
    while start < end:
        chunk = os.pread(fd, min(COUNT_CHUNK, end - start), start)
        if not chunk:
            return None
        count += chunk.count(b"\n")
        start += len(chunk)
    return count


class JobFollower:
    """The board of the job in `job_dir`, from its files; `refresh()` reads what changed and
    returns the job's record, `view()` the board as of the last refresh."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir
        self.logs: dict[str, LogTail] = {}
        self.spools = SpoolTail(job_dir)
        self.output = LogTail(os.path.join(job_dir, OUTPUT_NAME))  # the launcher's own lines
        self.notes: list[str] = []
        self.record: JobRecord | None = None
        self._stamp: tuple | None = None

    def refresh(self) -> tuple[JobRecord, dict[str, list[bytes]]]:
        """(the record, each rank's complete lines added since the last refresh)."""
        self.record = self._read_record()
        if self.record.data is not None and self.record.attempt > self.spools.attempt:
            self.spools = SpoolTail(self.job_dir, self.record.attempt)  # a restart: its own
        for name in self._names():
            self.logs.setdefault(name, LogTail(os.path.join(self.job_dir, log_name(name))))
        new = {name: tail.read() for name, tail in self.logs.items()}
        self.spools.refresh(n for n in self.logs if n != "sched")
        said = self.output.read()
        for line in said:
            text = plain(line).strip()
            if text.startswith("[launcher] "):
                self.notes = (self.notes + [text[len("[launcher] "):]])[-BOARD_LINES:]
        new[LAUNCHER] = said
        return self.record, new

    def _read_record(self) -> JobRecord:
        """job.json parsed again only when it changed (its size and time); the launcher's
        liveness is asked every time."""
        path = os.path.join(self.job_dir, JOB_FILE)
        try:
            st = os.stat(path)
            stamp: tuple | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = None
        if stamp is not None and stamp == self._stamp and self.record is not None:
            return read_record(self.job_dir, known=self.record.data)
        self._stamp = stamp
        return read_record(self.job_dir)

    def _names(self) -> list[str]:
        record = self.record
        names = [str(r.get("name")) for r in (record.plan.get("ranks", []) if record else [])
                 if r.get("name") is not None]
        if names:
            return names
        try:  # job.json not written yet: the logs there are
            found = sorted(f[len("rank_"):-len(".log")] for f in os.listdir(self.job_dir)
                           if f.startswith("rank_") and f.endswith(".log"))
        except OSError:
            return []
        return sorted(found, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n))

    def view(self, *, final: bool = False, title_note: str = "") -> BoardView:
        record = self.record or read_record(self.job_dir)
        data = record.data or {}
        result = data.get("result") if not record.running else None
        pids = data.get("pids") or {}
        started = record.started
        now = time.time()
        metrics = self.spools.metrics
        rows = []
        for name, tail in self.logs.items():
            found = metrics.get(name)
            raw = tail.screen.raw()[-BOARD_LINES:]
            runtime = ((result or {}).get("duration_s") if result else
                       (now - started if started else 0.0)) or 0.0
            rows.append(RankRow(
                name=name, status=_status(name, record, result, pids), runtime_s=float(runtime),
                step=found.step if found else None, metrics=dict(found.values) if found else {},
                steps_per_s=found.steps_per_s if found else None,
                curve_name=found.main if found else None,
                curve=found.main_curve() if found else [],
                lines=(tail.lines or 0) + (1 if tail.screen.current else 0),
                log_bytes=None if tail.lines is not None else tail.size,
                tail=[plain(line) for line in raw], tail_html=[to_html(line) for line in raw],
                tail_block=not (final and result and name == _cause(result))))
        plan = record.plan
        title = f"job {record.job_id}" + (f" — backend {plan['backend']}" if plan.get("backend")
                                          else "")
        title += _state_words(record, final) + title_note
        names = choose_metrics([m.counts for m in metrics.values()])
        return BoardView(title=title, rows=rows, notes=[] if final else list(self.notes),
                         log_dir=self.job_dir, final=final, metric_names=names)


def _cause(result: dict) -> str | None:
    cause = result.get("root_cause") or {}
    return str(cause.get("name")) if cause.get("last_lines") else None


def _status(name: str, record: JobRecord, result: dict | None, pids: dict) -> str:
    if result is not None:
        code = (result.get("exitcodes") or {}).get(name)
        if code is None:
            return "?"
        if code == 0:
            return "ok"
        exitcode, sig = describe_exit(code)
        return sig or f"exit {exitcode}"
    pid = pids.get(name)
    if record.data is None or not pid:
        return "starting" if record.running else "?"
    if record.running:
        return "running" if alive(int(pid)) else "ended"
    return "lost"


def _state_words(record: JobRecord, final: bool) -> str:
    state = record.state
    if state == "running":
        attempt = f" (attempt {record.attempt})" if record.attempt > 1 else ""
        return f" — running{attempt}"
    if state == "lost":
        pid = record.launcher.get("pid")
        return (f" — LOST: its launcher (pid {pid}) ended without a result"
                if record.data else " — LOST: its launcher ended before the ranks started")
    return " — succeeded" if state == "succeeded" else f" — {state.upper()}"
