"""A rank's tail as a terminal would finally show it: the failure table's quote (CLI and notebook
alike) and the board's tail. Each rank's output stream (output.py) keeps one.

Shown, a tail's lines are text without ANSI escapes (colours, cursor moves: `plain`): HTML and a
quoted table would show them as stray `[33m` text, or leave a terminal's colour on after the
quote; the board's colours are read from the same pattern (`ANSI`, board_colours.py).
"""
from __future__ import annotations

import re
from collections import deque

from platform_plugin.launcher.display.chatter import Chatter

TAIL_WINDOW = 4096  # where a chunk's last lines are looked for first
LINE_BYTES = 4096  # a tail's line: far more than a quote or a board cell shows; bounds a 5 MB line

# CSI sequences (colours, cursor moves, erase line: tqdm's `\x1b[A`), OSC sequences (titles,
# links), lone two-byte escapes, and the other C0 controls a terminal would not print
ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                  rb"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def plain(line: bytes) -> str:
    return ANSI.sub(b"", line).decode("utf-8", errors="replace")


def last_state(line: bytes) -> bytes:
    """A line redrawn with `\\r` (progress bar): keep what the terminal would finally show."""
    if b"\r" not in line:
        return line
    line = line.rstrip(b"\r")  # "a\r" is "a": a bar's line ended by a bare \r
    return line[line.rfind(b"\r") + 1:]


def last_pieces(chunk: bytes, lines: int) -> list[bytes]:
    """`chunk.rsplit(b"\n", lines + 1)`: its last `lines` lines and what follows them, looked
    for in its last TAIL_WINDOW bytes first (no split of the whole chunk for ordinary lines)."""
    pieces = chunk[-TAIL_WINDOW:].rsplit(b"\n", lines + 1)
    if len(pieces) < lines + 2 and len(chunk) > TAIL_WINDOW:  # long lines: the whole chunk
        pieces = chunk.rsplit(b"\n", lines + 1)
    return pieces


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
    start and its end) and `shown()` removes ANSI escapes (`plain`)."""

    def __init__(self, size: int, hide: Chatter | None = None) -> None:
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

    def feed_chunks(self, chunks: list[tuple[bytes, bool]]) -> None:
        """`feed` each (chunk, marked) in turn, where the last chunk alone holds more than
        `size` lines and no chatter mark: that one only (the others would scroll out)."""
        data, marked = chunks[-1]
        size = self.lines.maxlen or 1
        if len(chunks) > 1 and not marked and len(last_pieces(data, size)) == size + 2:
            self.lines.clear()
            self.current = b""
            chunks = chunks[-1:]
        for data, marked in chunks:
            self.feed(data, marked)

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

    def _keep(self, pieces: list[bytes], hide: Chatter | None) -> None:
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
        return [plain(line) for line in self.raw()]

    def raw(self) -> list[bytes]:
        """The same lines with their escapes (the board's HTML keeps their colours)."""
        lines = list(self.lines)
        current = last_state(self.current)
        if current and (self.hide is None or not self.hide.match(current)):
            lines.append(current)
        return lines[-(self.lines.maxlen or 1):]
