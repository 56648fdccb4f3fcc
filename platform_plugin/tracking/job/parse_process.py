"""A user's `--metrics-from-output` pattern runs in a process of its own, never on the output
path.

Python's `re` holds the GIL while it matches, and a pattern that backtracks (`(a+)+$` on a
line of `a`s ending in `b`: 2**n tries) can match for hours: in the launcher's loop it would
stop every rank's lines on their way to the logs and the cell, and the hang detector would see
silence. A thread would not help (the GIL); a process does. The launcher hands each chunk it
read to the parser over a pipe it never waits on (non-blocking, 1 MiB, plus BACKLOG_MAX held
in the launcher): when both are full the parser is behind, the chunk is not given to it and its
lines are counted, never waited for. At the job's end the parser gets CLOSE_WAIT_S to finish
what it was given, then it is stopped; the lines it never parsed are counted from its progress
file, and the launcher says the total once (`close()`'s note). The built-in MindSpore patterns
(output_metrics.BUILT_IN: a fixed text found first, then a linear regex on that line) stay in
the launcher's process: a job without a pattern of the user's starts no parser.

The parser is `python -m platform_plugin.tracking.job.parse_process CONFIG_JSON`, its stdin
the pipe; it writes the points into the ranks' spools exactly as the in-process reader does
(output_metrics.RankSpool: the rank's own points still win). It dies with the launcher
(PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import struct
import subprocess
import sys
import time

from platform_plugin.tracking.job.output_metrics import RankSpool, patterns_for
from platform_plugin.util.regular_file import open_regular_for_writing, read_regular_file

FRAME = struct.Struct("<cHIIQ")  # kind (D: data, G: data after a gap), rank, length, cut, ms
PIPE_SIZE = 1 << 20  # the pipe to the parser (the ranks' own pipes are this size too)
BACKLOG_MAX = 1 << 20  # bytes the launcher holds for the parser once the pipe is full
CLOSE_WAIT_S = 3.0  # the job ended: what the parser still has to parse gets this long
TICK_S = 0.25  # the parser writes its held points at least this often
PROGRESS_FILE = "parser.progress"  # lines the parser has parsed so far (in the spool folder)
PROGRESS_BYTES = 21  # what it holds: the count, right-aligned in 20 digits, and a newline
LOG_FILE = "parser.log"


class RankFeed:
    """One rank's chunks to the parser (what Output's stream calls like a RankLines)."""

    def __init__(self, parser: ParseProcess, index: int) -> None:
        self.parser, self.index = parser, index

    def scan(self, data: bytes, cut: int) -> None:
        self.parser.send(self.index, data, cut)


class ParseProcess:
    """The launcher's side: the parser started, fed, and stopped; what it could not parse
    counted (the output's reader for a job with a pattern of the user's)."""

    def __init__(self, spool_dir: str, option: str, labels: dict[str, str]) -> None:
        self.labels = labels  # output stream name -> rank label (its spool)
        self.index = {name: i for i, name in enumerate(labels)}
        self.backlog = bytearray()  # frames the pipe had no room for yet
        self.after_gap: set[int] = set()  # ranks whose last chunk was not given to the parser
        self.queued_lines = 0  # lines given to the parser
        self.dropped_lines = 0  # lines it could not be given (it was behind)
        self.broken = False  # the parser is gone (it exited before the job's end)
        self.stopped = False  # it did not finish in CLOSE_WAIT_S after the end: stopped
        self.progress_path = os.path.join(spool_dir, PROGRESS_FILE)
        self.log_path = os.path.join(spool_dir, LOG_FILE)
        read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        try:
            fcntl.fcntl(self.write_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
        except OSError:
            pass  # a smaller pipe only means drops sooner
        os.set_blocking(self.write_fd, False)
        config = json.dumps({"spool_dir": spool_dir, "pattern": option,
                             "labels": list(labels.values()), "parent": os.getpid()})
        env = dict(os.environ)
        # the folder that holds platform_plugin/ (this file: platform_plugin/tracking/job/)
        package_root = os.path.normpath(os.path.join(os.path.realpath(__file__), *[os.pardir] * 4))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "platform_plugin.tracking.job.parse_process", config],
                    stdin=read_fd, stdout=subprocess.DEVNULL, stderr=log, env=env,
                    start_new_session=True, close_fds=True)  # (a terminal's Ctrl-C: ours)
        except BaseException:
            os.close(self.write_fd)
            raise
        finally:
            os.close(read_fd)

    def rank(self, name: str) -> RankFeed | None:
        index = self.index.get(name)
        return None if index is None else RankFeed(self, index)

    def send(self, index: int, data: bytes, cut: int) -> None:
        """A rank's chunk to the parser, or counted as not parsed: never waited for."""
        lines = data.count(b"\n")
        if self.backlog:
            self._write_backlog()
        if self.broken or len(self.backlog) + FRAME.size + len(data) > BACKLOG_MAX:
            self.dropped_lines += lines
            self.after_gap.add(index)
            return
        kind = b"G" if index in self.after_gap else b"D"
        self.after_gap.discard(index)
        self.queued_lines += lines
        header = FRAME.pack(kind, index, len(data), cut, int(time.time() * 1000))
        if self.backlog:
            self.backlog += header
            self.backlog += data
            return
        try:
            written = os.writev(self.write_fd, (header, data))
        except BlockingIOError:
            written = 0
        except OSError:  # EPIPE: the parser exited (its log says why)
            self.broken = True
            return
        if written < len(header):
            self.backlog += header[written:]
            self.backlog += data
        elif written < len(header) + len(data):
            self.backlog += memoryview(data)[written - len(header):]

    def _write_backlog(self) -> None:
        try:
            written = os.write(self.write_fd, self.backlog)
        except BlockingIOError:
            return
        except OSError:
            self.broken = True
            return
        del self.backlog[:written]

    def tick(self) -> None:
        """The display's tick: what the pipe had no room for, now that it may have."""
        if self.backlog and not self.broken:
            self._write_backlog()

    def close(self) -> str:
        """The job's output ended: the parser finishes (or is stopped after CLOSE_WAIT_S);
        the note to say once when lines went unparsed ("" when none did)."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        while self.backlog and not self.broken:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [self.write_fd], [], left)[1]:
                break
            self._write_backlog()
        os.close(self.write_fd)  # the parser's end of input: it writes its last points
        try:
            self.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stopped = True
            self.process.kill()
            self.process.wait()
        return self.note()

    def parsed_lines(self) -> int:
        """As the parser last wrote it; 0 when it cannot be read (read as every spool file is:
        regular, bounded, no link followed)."""
        try:
            written = read_regular_file(self.progress_path, PROGRESS_BYTES,
                                        within=os.path.dirname(self.progress_path))
            return int(written.split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def lost_lines(self) -> int:
        return self.dropped_lines + max(0, self.queued_lines - self.parsed_lines())

    def note(self) -> str:
        lost = self.lost_lines()
        if not lost:
            return ""
        if self.broken or self.process.returncode not in (0, None) and not self.stopped:
            why = f"its parser exited with code {self.process.returncode} (see {self.log_path})"
        else:
            why = ("the pattern could not keep up with the ranks' output (a pattern that "
                   "backtracks, e.g. a repeat inside a repeat like (a+)+, can take hours on "
                   "one line)" + (f"; its parser was stopped {CLOSE_WAIT_S:.0f}s after the "
                                  "job's end" if self.stopped else ""))
        return (f"--metrics-from-output: {lost} line(s) were not parsed for metrics: {why}. "
                "The output itself was not held up: every line is in the logs")

    def written(self) -> int:
        """Points the parser wrote are in the spools; the launcher does not count them."""
        return 0


def _die_with(parent: int) -> None:
    """The parser dies with the launcher (it may sit in one regex match for hours)."""
    try:
        ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = 1, SIGKILL = 9
    except (OSError, AttributeError):
        pass  # no prctl: the pipe's end stops it between two matches
    if os.getppid() != parent:
        os._exit(1)  # the launcher died before PR_SET_PDEATHSIG was set


class Parser:
    """The parser process's work: frames from stdin into the ranks' spools."""

    def __init__(self, config: dict) -> None:
        patterns = patterns_for(config["pattern"])
        self.spools = [RankSpool(config["spool_dir"], label, patterns) for label in config["labels"]]
        self.skipping = [False] * len(self.spools)  # after a gap: up to the next line's start
        self.parsed = 0
        self.progress = open_regular_for_writing(os.path.join(config["spool_dir"], PROGRESS_FILE),
                                                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC)

    def frame(self, kind: bytes, index: int, data: bytes, cut: int, at_ms: int) -> None:
        lines = self.spools[index].lines
        if kind == b"G":  # what came before was not given to us: its line's end is no line
            lines.carry, self.skipping[index] = b"", True
        if self.skipping[index]:
            first = data.find(b"\n") + 1
            if not first:
                return
            self.skipping[index] = False
            data, cut = data[first:], cut - first
        lines.scan(data, cut, at_ms)
        self.parsed += data.count(b"\n")  # (the line cut by the gap counts as not parsed)

    def run(self, fd: int) -> None:
        pending = bytearray()
        while True:
            if select.select([fd], [], [], TICK_S)[0]:
                block = os.read(fd, PIPE_SIZE)
                if not block:
                    break
                pending += block
                while len(pending) >= FRAME.size:
                    kind, index, length, cut, at_ms = FRAME.unpack_from(pending)
                    end = FRAME.size + length
                    if len(pending) < end:
                        break
                    data = bytes(pending[FRAME.size:end])
                    del pending[:end]
                    self.frame(kind, index, data, cut, at_ms)
                    os.pwrite(self.progress, b"%*d\n" % (PROGRESS_BYTES - 1, self.parsed), 0)
            now = time.monotonic()
            for spool in self.spools:
                spool.tick(now)
        for spool in self.spools:
            spool.close()
        os.close(self.progress)


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    _die_with(int(config["parent"]))
    Parser(config).run(sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
