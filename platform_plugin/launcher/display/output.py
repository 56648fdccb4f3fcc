"""Rank output: every byte to `<job_dir>/rank_<N>.log` unchanged, and a prefixed display.

The supervisor's loop feeds chunks here and calls `flush()` from the thread that runs the job
(in a notebook that is the cell's thread, the only one whose prints ipykernel routes reliably).
The display works on complete lines: a partial line is held until its newline, or shown after
`PARTIAL_FLUSH_S` of quiet (a prompt, a progress bar), and a `\r` progress line shows its last
state. In a notebook a chatty rank is capped to `max_lines_per_s`; the log files stay complete.
"""
from __future__ import annotations

import collections
import os
import sys
import time
from typing import IO, Any, Callable

from platform_plugin.launcher.display.chatter import Chatter
from platform_plugin.launcher.display.screen_tail import ScreenTail, last_state
from platform_plugin.launcher.display.show import parse_show
from platform_plugin.launcher.processes.result import name_label
from platform_plugin.tracking.job.output_metrics import LineScanner, OutputReader

TAIL_LINES = 20
PARTIAL_FLUSH_S = 1.0
PARTIAL_MAX = 64 * 1024
LOG_BATCH = 1 << 20  # a rank's log is written once this much is held ...
QUIET_START_S = 3.0  # ranks silent this long after the start: say what they are most likely doing
LOG_DELAY_S = 0.1  # ... or once the oldest byte held is this old (checked at the display's tick)
TAIL_HELD = 1 << 18  # a rank's chunks kept for its tail before they are fed to it (memory)


def redrawn(text: bytes) -> bytes:
    """`text` (whole lines) with each line that holds a `\\r` in its last state; the lines
    between are copied in one piece each (tqdm redraws a line in 50 or so: a call per line of
    the chunk would cost far more than the copy)."""
    pieces: list[bytes | memoryview] = []
    view, done = memoryview(text), 0  # text[:done] is in pieces
    cr = text.find(b"\r")
    while cr >= 0:
        start = text.rfind(b"\n", done, cr) + 1  # done is 0 or the previous line's newline
        end = text.find(b"\n", cr)
        end = len(text) if end < 0 else end
        pieces += (view[done:start], last_state(text[start:end]))
        done = end
        cr = text.find(b"\r", end)
    pieces.append(view[done:])
    return b"".join(pieces)


class _RankLog:
    """A process's log file: every byte it wrote, unchanged, written in batches - one writev
    of the chunks read, once LOG_BATCH bytes or LOG_DELAY_S are held: ext4 takes about half
    the CPU for 1 MiB written at once as for the same bytes in 64 KiB writes (the launcher's
    largest cost for a chatty job; docs/benchmarks.md, output). A reader of the file (`tail
    -f`) sees a line at most LOG_DELAY_S later; a launcher killed with SIGKILL loses what it
    held (as it loses what is still in the pipes). A full or failing disk stops the logging
    (`error`: the supervisor then stops the job), never the loop."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "wb", buffering=0)
        self.name = path
        self.held: list[bytes] = []
        self.size = 0  # bytes held
        self.since = 0.0  # when the oldest of them was read
        self.error: OSError | None = None

    def add(self, data: bytes, now: float) -> None:
        if self.error is not None:
            return
        if not self.held:
            self.since = now
        self.held.append(data)
        self.size += len(data)
        if self.size >= LOG_BATCH or len(self.held) >= 512:  # writev takes up to IOV_MAX (1024)
            self.write()

    def write(self) -> None:
        """Write everything held now."""
        held, size = self.held, self.size
        if not held:
            return
        self.held, self.size = [], 0
        try:
            done = os.writev(self.file.fileno(), held)
            if done < size:  # a short write, just before ENOSPC: the rest (then the error)
                rest = memoryview(b"".join(held))[done:]
                while rest:
                    rest = rest[os.write(self.file.fileno(), rest):]
        except OSError as exc:
            self.error = exc

    def close(self) -> None:
        self.write()
        try:
            self.file.close()
        except OSError:  # pragma: no cover - unbuffered: nothing left to flush
            pass


class _RankStream:
    def __init__(self, name: str, log_path: str, shown: bool, max_lines_per_s: float | None,
                 hide: Chatter | None = None, tail_lines: int = TAIL_LINES) -> None:
        self.name = name
        self.prefix = f"[{name_label(name)}] "
        self.prefix_bytes = self.prefix.encode()
        self.newline_prefix = b"\n" + self.prefix_bytes
        # torch prefixes a rank's uncaught exception with its own `[rank1]:`: not prefixed twice
        self.own_prefix = f"[rank{name}]:".encode() if name.isdigit() else b""
        self.log = _RankLog(log_path)
        self.shown = shown
        self.partial = b""
        self.partial_since = 0.0
        self.tail_lines = tail_lines
        self._screen: ScreenTail | None = None  # made when first asked for (`screen`)
        self._unseen: list[tuple[bytes, bool]] = []  # chunks not yet fed to it, and their marks
        self._unseen_size = 0
        self.rate = max_lines_per_s
        self.tokens = max_lines_per_s or 0.0
        self.refilled = time.monotonic()
        self.held_now = 0  # held since the last note
        self.held_total = 0
        self.hide = hide  # lines kept out of the display: `search(chunk)`, `match(line)` (quiet.py)
        self.hidden = 0
        # metrics read from the lines (tracking/job/output_metrics.RankLines, or the parser
        # process's feed), a tracked rank's
        self.metrics: LineScanner | None = None

    @property
    def screen(self) -> ScreenTail:
        """The last lines as a terminal shows them (screen_tail.py), brought up to date. The
        chunks are kept until it is asked for (a failure's quote, the board's redraw) or
        TAIL_HELD bytes were read: then only the chunks that can still show are looked at (a
        chunk of many lines hides all before it)."""
        return self._settle_tail()

    def _settle_tail(self) -> ScreenTail:
        """Feed the chunks kept for the tail to it; they are let go."""
        if self._screen is None:
            self._screen = ScreenTail(self.tail_lines, self.hide)
        if self._unseen:
            self._screen.feed_chunks(self._unseen)
            self._unseen, self._unseen_size = [], 0
        return self._screen

    def feed(self, data: bytes, now: float, out: list[bytes | memoryview]) -> None:
        self.log.add(data, now)
        cut = data.rfind(b"\n") + 1
        hide = self.hide
        # the chatter test scans every byte (quiet.py): one per chunk, shared by the tail and
        # the display; a chunk ending no line needs none
        marked = bool(cut) and hide is not None and hide.search(data)
        self._unseen.append((data, marked))  # the same bytes the log holds: no copy
        self._unseen_size += len(data)
        if self._unseen_size > TAIL_HELD or len(self._unseen) > 256:
            self._settle_tail()
        if self.metrics is not None:
            self.metrics.scan(data, cut)
        if not cut:  # no line ends in this chunk
            self.partial += data
            if self.partial:
                self.partial_since = self.partial_since or now
        else:
            held = self.partial
            if held and not marked and hide is not None:
                # the one line `data` alone does not hold: the held part and its end
                marked = hide.search(held + data[:data.find(b"\n") + 1])
            self.partial = data[cut:]
            self.partial_since = now if self.partial else 0.0
            if marked or self.shown and (self.rate is not None or b"\r" in data or
                                         b"\r" in held):
                self._lines(b"".join((held, memoryview(data)[:cut])), now, out, marked)
            elif self.shown:  # the common case: prefixed as it is, the chunk never copied
                self._prefixed(held, data, cut, out)
        if len(self.partial) > PARTIAL_MAX:
            self.flush_partial(now, out)

    def _prefixed(self, held: bytes, data: bytes, cut: int, out: list[bytes | memoryview]) -> None:
        """`held` + `data[:cut]` (whole lines, nothing to change) prefixed for the display.
        One bytes.replace for the whole chunk (several times faster than str.replace; limiting
        it to all newlines but the last needs a count, slower than the replace itself); what
        follows the last newline and its prefix are cut off by a view, not a copy:
        "a\\nb\\nc" -> "a\\n[p]b\\n[p]c" -> "a\\n[p]b\\n". The first line's prefix is a piece of
        its own. Bytes all the way: decoding, if the display needs text at all, happens in
        write_pending."""
        prefixed = data.replace(b"\n", self.newline_prefix)
        own = self.own_prefix
        starts_own = own and (held + data[:len(own)]).startswith(own)
        if own and (starts_own or own in data):  # (rare: one search per chunk) theirs alone
            prefixed = prefixed.replace(self.newline_prefix + own, b"\n" + own)
            cut_off = len(data) - cut + (0 if data[cut:].startswith(own) else
                                         len(self.prefix_bytes))
            first = b"" if starts_own else self.prefix_bytes
            out.append(first + held if held else first)
            out.append(memoryview(prefixed)[:len(prefixed) - cut_off])
            return
        out.append(self.prefix_bytes + held if held else self.prefix_bytes)
        out.append(memoryview(prefixed)[:len(prefixed) - (len(data) - cut) -
                                        len(self.prefix_bytes)])

    def flush_partial(self, now: float, out: list[bytes | memoryview]) -> None:
        if self.partial:
            line = last_state(self.partial) + b"\n"
            self._lines(line, now, out, self.hide is not None and self.hide.search(line))
            self.partial, self.partial_since = b"", 0.0

    def _lines(self, complete: bytes, now: float, out: list[bytes | memoryview],
               marked: bool) -> None:
        """`complete` ends with a newline; `marked`: it may hold chatter (`hide.search`)."""
        if b"\r" in complete:
            complete = redrawn(complete)
        if marked:  # the lines are matched one by one only then
            complete = self._without_hidden(complete)
            if not complete:
                return
        if not self.shown:
            return
        if self.rate is not None:
            complete = self._within_rate(complete, now, out)
            if not complete:
                return
        self._prefixed(b"", complete, len(complete), out)

    def _without_hidden(self, complete: bytes) -> bytes:
        hide = self.hide
        if hide is None:  # (marked by hide.search only)
            return complete
        lines = complete[:-1].split(b"\n")
        kept = [line for line in lines if not hide.match(line)]
        self.hidden += len(lines) - len(kept)
        return b"\n".join(kept) + b"\n" if kept else b""

    def _within_rate(self, complete: bytes, now: float, out: list[bytes | memoryview]) -> bytes:
        rate = self.rate
        if rate is None:  # no line cap: every line is shown
            return complete
        self.tokens = min(rate, self.tokens + (now - self.refilled) * rate)
        self.refilled = now
        count = complete.count(b"\n")
        allowed = min(count, int(self.tokens))
        self.tokens -= allowed
        if allowed and self.held_now:
            out.append(self._held_note())
            self.held_now = 0
        if allowed < count:
            held = count - allowed
            self.held_now += held
            self.held_total += held
            if not allowed:
                return b""
            complete = b"\n".join(complete.split(b"\n", allowed)[:allowed]) + b"\n"
        return complete

    def _held_note(self) -> bytes:
        return f"{self.prefix}... {self.held_now} lines held back (all in the log)\n".encode()

    def close(self, out: list[bytes | memoryview]) -> None:
        self.flush_partial(time.monotonic(), out)
        if self.shown and self.held_now:
            out.append(self._held_note())
            self.held_now = 0
        self.log.close()


def _byte_layer(stdout: IO[str]) -> IO[bytes] | None:
    """`stdout`'s byte stream when the display can skip decoding: a UTF-8 TextIOWrapper (a
    terminal, a file, a pipe: the CLI). None in a kernel (ipykernel's stream has no byte
    layer) or for any other encoding (the text path applies the stream's own encoding/errors)."""
    binary = getattr(stdout, "buffer", None)
    encoding = (getattr(stdout, "encoding", "") or "").lower().replace("-", "")
    return binary if binary is not None and encoding == "utf8" else None


class Output:
    """All streams of one job. `write` defaults to the current sys.stdout at flush time."""

    def __init__(self, show: str | set[str] | None = "all", *, max_lines_per_s: float | None = None,
                 write: Callable[[str], object] | None = None,
                 hide: Chatter | None = None) -> None:
        self.hide = hide
        self.show = parse_show(show) if isinstance(show, str) or show is None else set(show)
        self.max_lines_per_s = max_lines_per_s
        self._write = write
        self._streams: dict[str, _RankStream] = {}
        # display pieces (bytes or views of them): whole lines, the bytes the ranks wrote
        self._pending: list[bytes | memoryview] = []
        self._stdout_written = False  # written to sys.stdout since its last flush
        # the sys.stdout last written, its byte layer
        self._stdout: IO[str] | None = None
        self._stdout_bytes: IO[bytes] | None = None
        self.last_output = time.monotonic()
        self.log_failure = ""  # set when a rank's log could not be written (e.g. disk full)
        self.tail_lines = TAIL_LINES  # lines each rank's ScreenTail keeps (a board may want more)
        self._notes_soon: collections.deque[str] = collections.deque()  # from other threads
        self._opened_at = time.monotonic()
        self._heard = False  # a rank wrote something
        self._quiet_said = False
        # tracking/job/output_metrics.OutputMetrics (or parse_process.ParseProcess, a user's
        # pattern): set (job.Attempt) when a tracked job parses its ranks' lines for metrics;
        # its points are written at the display's tick
        self.metrics: OutputReader | None = None

    def open(self, name: str, log_path: str) -> None:
        shown = self.show is None or name in self.show
        stream = self._streams[name] = _RankStream(name, log_path, shown, self.max_lines_per_s,
                                                   self.hide, self.tail_lines)
        if self.metrics is not None:
            stream.metrics = self.metrics.rank(name)

    def feed(self, name: str, data: bytes) -> None:
        now = time.monotonic()
        self.last_output = now
        self._heard = True
        stream = self._streams[name]
        stream.feed(data, now, self._pending)
        if stream.log.error is not None:
            self._log_failed(stream.log)

    def _log_failed(self, log: _RankLog) -> None:
        if log.error is not None and not self.log_failure:
            self.log_failure = f"{log.error.strerror or log.error} writing {log.name}"

    def log_only(self, name: str, data: bytes) -> None:
        """Launcher text for one rank's log, not the display (its Python stack, stacks.py)."""
        stream = self._streams.get(name)
        if stream is not None:
            stream.log.add(data, time.monotonic())
            stream.log.write()  # after what the rank wrote before, at once

    # -- what the supervisor and the job tell a display: prefixed lines need none of it, the
    # board (board.py) redraws on it
    def started(self, supervisor: Any) -> None:
        """The ranks run (`supervisor`: processes.supervisor.Supervisor, which imports this)."""

    def ended(self, result: Any) -> None:
        """The ranks ended (`result`: the JobResult)."""

    def waiting_for_tracking(self, waiting: bool) -> None:
        """The ranks ended and the job waits (or no longer) for their points' delivery."""

    def note(self, text: str) -> None:
        """A launcher message in the display (never in a rank's log)."""
        self._pending.append(f"[launcher] {text}\n".encode())

    def quiet_start(self, text: str) -> None:
        """The ranks have been silent since the start (QUIET_START_S): say what they wait for."""
        self.note(text)

    def note_soon(self, text: str) -> None:
        """`note` from another thread (a check of the tracking server): shown at the next tick."""
        self._notes_soon.append(text)

    def flush(self) -> None:
        """Partial lines quiet for PARTIAL_FLUSH_S, then everything pending (the display's tick).
        sys.stdout is flushed here only: in a kernel each flush waits for ipykernel's IO thread."""
        while self._notes_soon:
            self.note(self._notes_soon.popleft())
        now = time.monotonic()
        if not (self._heard or self._quiet_said) and self._streams \
                and now - self._opened_at >= QUIET_START_S:
            self._quiet_said = True  # the first seconds of a job: silence, unexplained
            self.quiet_start(f"the ranks started {now - self._opened_at:.0f}s ago and have printed "
                             "nothing yet: most often they are importing their framework (torch, "
                             "MindSpore: seconds on a CPU), then each waits for the others at "
                             "the rendezvous (init_process_group, init())")
        if self.metrics is not None:
            self.metrics.tick()
        for stream in self._streams.values():
            if stream.partial and now - stream.partial_since >= PARTIAL_FLUSH_S:
                stream.flush_partial(now, self._pending)
            if stream.log.held and now - stream.log.since >= LOG_DELAY_S:
                stream.log.write()
                self._log_failed(stream.log)
        self.write_pending()
        if self._stdout_written:
            self._stdout_written = False
            sys.stdout.flush()

    def write_pending(self) -> None:
        """Write the display made so far (the supervisor calls it after every piece read)."""
        if self._pending:
            # piece by piece, not joined: a joined string of several MiB is fresh memory from
            # the kernel at every call (page faults), the pieces are reused heap memory
            pieces, self._pending = self._pending, []
            if self._write is None:
                binary = self._stdout_byte_layer()
                if binary is not None:  # the CLI: the ranks' bytes, never decoded at all
                    for piece in pieces:
                        binary.write(piece)
                    return
            write = self._write or sys.stdout.write
            for piece in pieces:
                write(str(piece, "utf-8", "replace"))

    def _stdout_byte_layer(self) -> IO[bytes] | None:
        """The byte layer of the current sys.stdout, if it has a usable one (looked up once per
        stream). Its text layer is flushed when the display starts writing to it: the launcher's
        lines printed before the job stay before it (and after it: close() flushes)."""
        stdout = sys.stdout
        if stdout is not self._stdout:
            self._stdout, self._stdout_bytes = stdout, _byte_layer(stdout)
            if self._stdout_bytes is not None:
                stdout.flush()
        self._stdout_written = True
        return self._stdout_bytes

    def tail(self, name: str) -> list[str]:
        """A rank's last lines for the failure table, as a terminal finally shows them (one
        code path for the CLI and the notebook: ScreenTail)."""
        return self._streams[name].screen.shown()

    def hidden(self) -> int:
        """Lines kept out of the display as library chatter (quiet.py)."""
        return sum(s.hidden for s in self._streams.values())

    def held_back(self) -> dict[str, int]:
        return {name: s.held_total for name, s in self._streams.items() if s.held_total}

    def write_logs(self) -> None:
        """Write what every rank log holds now (the job's end: before its result is known)."""
        for stream in self._streams.values():
            stream.log.write()
            self._log_failed(stream.log)

    def close(self) -> None:
        for stream in self._streams.values():
            stream.close(self._pending)
            self._log_failed(stream.log)
        if self.metrics is not None:  # the last points, before tracking's end is written
            said = self.metrics.close()  # lines it could not parse: said once, here
            if said:
                self.note(said)
        self.flush()
