"""Rank output: every byte to `<job_dir>/rank_<N>.log` unchanged, and a prefixed display.

The supervisor's loop feeds chunks here and calls `flush()` from the thread that runs the job
(in a notebook that is the cell's thread, the only one whose prints ipykernel routes reliably).
The display works on complete lines: a partial line is held until its newline, or shown after
`PARTIAL_FLUSH_S` of quiet (a prompt, a progress bar), and a `\r` progress line shows its last
state. In a notebook a chatty rank is capped to `max_lines_per_s`; the log files stay complete.
"""
from __future__ import annotations

import sys
import time
from collections import deque

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)

from platform_plugin.launcher.show import parse_show

if TYPE_CHECKING:
    from typing import Callable

HELPER_NAMES = ("sched", "store")  # processes of a job that are not ranks
TAIL_LINES = 20
TAIL_WINDOW = 4096  # where a chunk's last TAIL_LINES lines are looked for first
PARTIAL_FLUSH_S = 1.0
PARTIAL_MAX = 64 * 1024
LINE_BYTES = 4096  # a tail's line: far more than a quote or a board cell shows; bounds a 5 MB line


def last_pieces(chunk: bytes, lines: int) -> list[bytes]:
    """`chunk.rsplit(b"\n", lines + 1)`: its last `lines` lines and what follows them, looked
    for in its last TAIL_WINDOW bytes first (no split of the whole chunk for ordinary lines)."""
    pieces = chunk[-TAIL_WINDOW:].rsplit(b"\n", lines + 1)
    if len(pieces) < lines + 2 and len(chunk) > TAIL_WINDOW:  # long lines: the whole chunk
        pieces = chunk.rsplit(b"\n", lines + 1)
    return pieces


def last_state(line: bytes) -> bytes:
    """A line redrawn with `\\r` (progress bar): keep what the terminal would finally show."""
    if b"\r" not in line:
        return line
    segments = [s for s in line.split(b"\r") if s]
    return segments[-1] if segments else b""


def redrawn(text: bytes) -> bytes:
    """`text` (whole lines) with each line that holds a `\\r` in its last state; the lines
    between are copied in one piece each (tqdm redraws a line in 50 or so: a call per line of
    the chunk cost ~1 s of CPU per 1,000,000 lines of such output)."""
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


def bounded(line: bytes) -> bytes:
    """At most ~LINE_BYTES: its start and its end (an error often ends a line a bar began)."""
    if len(line) <= LINE_BYTES:
        return line
    return line[:LINE_BYTES // 2] + " … ".encode() + line[-(LINE_BYTES // 2):]


class ScreenTail:
    """A rank's last `size` complete lines and the line it is drawing now, as a terminal would
    finally show them: the failure table's quote (CLI and notebook alike) and the board's tail.

    The display stream shows a progress bar every PARTIAL_FLUSH_S and cuts a huge line into
    PARTIAL_MAX pieces, each a line of its own: right for a stream of prefixed lines, wrong for
    a quote of the last lines. Here a `\\r` redraw replaces the line it redraws (a tqdm bar is
    one line in its last state), a line is one line however long (kept to about LINE_BYTES, its
    start and its end) and `shown()` removes ANSI escapes (board_tail.py)."""

    def __init__(self, size: int, hide=None):
        self.lines: deque[bytes] = deque(maxlen=size)
        self.current = b""
        self.hide = hide  # quiet.py's chatter filter: `search(chunk)`, `match(line)`

    def feed(self, data: bytes, marked: bool | None = None) -> None:
        """`marked`: `hide.search(data)` when the caller made it (the display's stream: that
        test scans every byte of the chunk, once is enough)."""
        if b"\n" in data:
            hide = self.hide
            # lines are matched only where a chatter mark is (the regex costs, most jobs have
            # none); a chatter line cut between two chunks has its mark in the drawn part
            if hide is not None and not ((hide.search(data) if marked is None else marked) or (
                    self.current and hide.search(self.current[:256] + data[:256]))):
                hide = None
            if hide is None and not self.current and len(data) <= LINE_BYTES and \
                    b"\r" not in data:  # a few whole lines (a rank printing a line a time)
                pieces = data.split(b"\n")
                self.current = pieces.pop()  # no `\r`, at most LINE_BYTES: as it is
                self.lines.extend(pieces)
                return
            if hide is not None:
                # chatter first, over the whole chunk: a chunk ending in many chatter lines
                # must not push the rank's real last lines out of the window below
                pieces = data.split(b"\n")
                pieces[0] = self.current + pieces[0]
            else:
                pieces = self._last_pieces(data)
            data = pieces.pop()  # what follows the last newline
            self._keep(pieces, hide)
            self.current = b""
        if data:  # the line being drawn: from its last `\\r` redraw on ("a\\r" stays "a")
            drawing = self.current + data
            start = drawing.rstrip(b"\r").rfind(b"\r") + 1
            self.current = bounded(drawing[start:])

    def _last_pieces(self, data: bytes) -> list[bytes]:
        """The chunk's last `size` lines and what follows them, looked for in its last bytes
        first (no split of the whole chunk)."""
        size = self.lines.maxlen or 1
        pieces = last_pieces(data, size)
        if len(pieces) > size + 1:
            del pieces[0]  # earlier lines: scrolled out
        else:  # the chunk's first line continues the one being drawn
            pieces[0] = self.current + pieces[0]
        return pieces

    def _keep(self, pieces: list[bytes], hide) -> None:
        """The last `size` complete lines of `pieces` that are not hidden."""
        size = self.lines.maxlen or 1
        last = pieces[-size:]
        if hide is None and max(map(len, last), default=0) <= LINE_BYTES and \
                b"\r" not in b"".join(last):
            self.lines.extend(last)  # ordinary lines (the common case): no call per line
            return
        kept: list[bytes] = []
        for piece in reversed(pieces):
            line = bounded(last_state(piece))
            if hide is None or not hide.match(line):
                kept.append(line)
                if len(kept) == size:
                    break
        self.lines.extend(reversed(kept))

    def shown(self) -> list[str]:
        """The lines to show (the line being drawn last), escapes removed."""
        from platform_plugin.launcher.board_tail import plain  # a failure or a board needs it
        return [plain(line) for line in self.raw()]

    def raw(self) -> list[bytes]:
        """The same lines with their escapes (the board's HTML keeps their colours)."""
        lines = list(self.lines)
        current = last_state(self.current)
        if current and (self.hide is None or not self.hide.match(current)):
            lines.append(current)
        return lines[-(self.lines.maxlen or 1):]


class _RankStream:
    def __init__(self, name: str, log_path: str, shown: bool, max_lines_per_s: float | None,
                 hide=None, tail_lines: int = TAIL_LINES):
        self.name = name
        self.label = name if name in HELPER_NAMES else f"rank {name}"
        self.prefix = f"[{self.label}] "
        self.prefix_bytes = self.prefix.encode()
        self.newline_prefix = b"\n" + self.prefix_bytes
        self.log = open(log_path, "wb", buffering=0)  # unbuffered: the file is complete even if we die
        self.shown = shown
        self.partial = b""
        self.partial_since = 0.0
        self.screen = ScreenTail(tail_lines, hide)  # the last lines as a terminal shows them
        self.rate = max_lines_per_s
        self.tokens = max_lines_per_s or 0.0
        self.refilled = time.monotonic()
        self.held_now = 0  # held since the last note
        self.held_total = 0
        self.hide = hide  # lines kept out of the display: `search(chunk)`, `match(line)` (quiet.py)
        self.hidden = 0
        self.log_error: OSError | None = None  # the log could not be written (disk full)

    def _log(self, data: bytes) -> None:
        """Append to the log; a full or failing disk stops the logging (the supervisor then
        stops the job), never the loop: the display and the tail keep working."""
        if self.log_error is not None:
            return
        view = memoryview(data)
        try:
            while view:  # an unbuffered write may be short just before ENOSPC
                view = view[self.log.write(view) or 0:]
        except OSError as exc:
            self.log_error = exc

    def feed(self, data: bytes, now: float, out: list[bytes | memoryview]) -> None:
        self._log(data)
        cut = data.rfind(b"\n") + 1
        # the chatter test scans every byte (~40 us per 64 KiB when the text holds a "["): one
        # per chunk, shared by the tail and the display; a chunk ending no line needs none
        marked = bool(cut) and self.hide is not None and self.hide.search(data)
        self.screen.feed(data, marked)
        if not cut:  # no line ends in this chunk
            self.partial += data
            if self.partial:
                self.partial_since = self.partial_since or now
        else:  # a chunk of whole lines (the common case) is not copied at all
            complete = (b"".join((self.partial, memoryview(data)[:cut])) if self.partial
                        else data[:cut])
            if self.partial and not marked and self.hide is not None:
                # the one line `data` alone does not hold: the held part and its end
                marked = self.hide.search(complete[:len(self.partial) + data.find(b"\n") + 1])
            self.partial = data[cut:]
            self.partial_since = now if self.partial else 0.0
            self._lines(complete, now, out, marked)
        if len(self.partial) > PARTIAL_MAX:
            self.flush_partial(now, out)

    def flush_partial(self, now: float, out: list[bytes | memoryview]) -> None:
        if self.partial:
            line = last_state(self.partial) + b"\n"
            self._lines(line, now, out, self.hide is not None and self.hide.search(line))
            self.partial, self.partial_since = b"", 0.0

    def _lines(self, complete: bytes, now: float, out: list[bytes | memoryview],
               marked: bool) -> None:
        """`complete` ends with a newline; `marked`: it may hold chatter (`hide.search`). The
        common case (no \\r, no cap) is one replace for the whole chunk and no decode here:
        throughput matters when ranks print a lot."""
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
        # one bytes.replace for the whole chunk (several times faster than str.replace; limiting
        # it to all newlines but the last needs a count, slower than the replace itself), the
        # trailing prefix cut by a view, not a copy: "a\n[p]b\n[p]" -> "a\n[p]b\n". The first
        # line's prefix is a piece of its own, not a concatenation (another copy). Bytes all
        # the way: decoding, if the display needs text at all, happens in write_pending.
        prefixed = complete.replace(b"\n", self.newline_prefix)
        out.append(self.prefix_bytes)
        out.append(memoryview(prefixed)[:len(prefixed) - len(self.prefix_bytes)])

    def _without_hidden(self, complete: bytes) -> bytes:
        lines = complete[:-1].split(b"\n")
        kept = [line for line in lines if not self.hide.match(line)]
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
        try:
            self.log.close()
        except OSError:  # pragma: no cover - unbuffered: nothing left to flush
            pass


def _byte_layer(stdout):
    """`stdout`'s byte stream when the display can skip decoding: a UTF-8 TextIOWrapper (a
    terminal, a file, a pipe: the CLI). None in a kernel (ipykernel's stream has no byte
    layer) or for any other encoding (the text path applies the stream's own encoding/errors)."""
    binary = getattr(stdout, "buffer", None)
    encoding = (getattr(stdout, "encoding", "") or "").lower().replace("-", "")
    return binary if binary is not None and encoding == "utf8" else None


class Output:
    """All streams of one job. `write` defaults to the current sys.stdout at flush time."""

    def __init__(self, show: str | set[str] | None = "all", *, max_lines_per_s: float | None = None,
                 write: Callable[[str], object] | None = None, hide=None):
        self.hide = hide
        self.show = parse_show(show) if isinstance(show, str) or show is None else set(show)
        self.max_lines_per_s = max_lines_per_s
        self._write = write
        self._streams: dict[str, _RankStream] = {}
        # display pieces (bytes or views of them): whole lines, the bytes the ranks wrote
        self._pending: list[bytes | memoryview] = []
        self._stdout_written = False  # written to sys.stdout since its last flush
        self._stdout = self._stdout_bytes = None  # the sys.stdout last written, its byte layer
        self.last_output = time.monotonic()
        self.log_failure = ""  # set when a rank's log could not be written (e.g. disk full)
        self.tail_lines = TAIL_LINES  # lines each rank's ScreenTail keeps (a board may want more)

    def open(self, name: str, log_path: str) -> None:
        shown = self.show is None or name in self.show
        self._streams[name] = _RankStream(name, log_path, shown, self.max_lines_per_s,
                                          self.hide, self.tail_lines)

    def feed(self, name: str, data: bytes) -> None:
        now = time.monotonic()
        self.last_output = now
        stream = self._streams[name]
        stream.feed(data, now, self._pending)
        if stream.log_error is not None and not self.log_failure:
            exc = stream.log_error
            self.log_failure = f"{exc.strerror or exc} writing {stream.log.name}"

    def log_only(self, name: str, data: bytes) -> None:
        """Launcher text for one rank's log, not the display (its Python stack, stacks.py)."""
        stream = self._streams.get(name)
        if stream is not None:
            stream._log(data)

    def note(self, text: str) -> None:
        """A launcher message in the display (never in a rank's log)."""
        self._pending.append(f"[launcher] {text}\n".encode())

    def flush(self) -> None:
        """Partial lines quiet for PARTIAL_FLUSH_S, then everything pending (the display's tick).
        sys.stdout is flushed here only: in a kernel each flush waits for ipykernel's IO thread."""
        now = time.monotonic()
        for stream in self._streams.values():
            if stream.partial and now - stream.partial_since >= PARTIAL_FLUSH_S:
                stream.flush_partial(now, self._pending)
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

    def _stdout_byte_layer(self):
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

    def close(self) -> None:
        for stream in self._streams.values():
            stream.close(self._pending)
        self.flush()
