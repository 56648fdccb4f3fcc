"""A rank's last lines as a terminal would finally show them (the board's tail, and in a
notebook the failure table's quote of the root cause).

The display stream (output.py) shows a progress bar every `PARTIAL_FLUSH_S` and cuts a huge
line into `PARTIAL_MAX` pieces, each a line of its own: right for a stream of prefixed lines,
wrong for a board that redraws in place. Here a `\\r` redraw replaces the line it redraws (8
tqdm bars show 8 bars, not every state a flush caught), a line is one line however long (kept
to about `LINE_BYTES` bytes, its start and its end: the board clips it anyway), and ANSI
escapes (colours, cursor moves) are removed: HTML would show them as stray `[33m` text.
"""
from __future__ import annotations

import re
from collections import deque

# the Output's own (a board is an Output: output.py is imported already)
from platform_plugin.launcher.output import last_pieces, last_state

LINE_BYTES = 4096  # far more than a board cell shows; bounds the memory of a 5 MB line
# CSI sequences (colours, cursor moves, erase line: tqdm's `\x1b[A`), OSC sequences (titles,
# links), lone two-byte escapes, and the other C0 controls a terminal would not print
ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                  rb"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def bounded(line: bytes) -> bytes:
    """At most ~LINE_BYTES: its start and its end (an error often ends a line a bar began)."""
    if len(line) <= LINE_BYTES:
        return line
    return line[:LINE_BYTES // 2] + " … ".encode() + line[-(LINE_BYTES // 2):]


def plain(line: bytes) -> str:
    return ANSI.sub(b"", line).decode("utf-8", errors="replace")


class ScreenTail:
    """The last `size` complete lines of a rank and the line it is drawing now."""

    def __init__(self, size: int, hide=None):
        self.lines: deque[bytes] = deque(maxlen=size)
        self.current = b""
        self.hide = hide  # quiet.py's chatter filter: `match(line)` (None: keep every line)

    def feed(self, data: bytes) -> None:
        if b"\n" in data:
            if self.hide is not None and self.hide.search(data):
                # chatter first, over the whole chunk: a chunk ending in many chatter lines
                # must not push the rank's real last lines out of the window below
                pieces = data.split(b"\n")
                pieces[0] = self.current + pieces[0]
            else:
                pieces = self._last_pieces(data)
            data = pieces.pop()  # what follows the last newline
            self._keep(pieces)
            self.current = b""
        if data:  # the line being drawn: from its last `\r` redraw on ("a\r" stays "a")
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

    def _keep(self, pieces: list[bytes]) -> None:
        """The last `size` complete lines of `pieces` that are not hidden."""
        size = self.lines.maxlen or 1
        kept: list[bytes] = []
        for piece in reversed(pieces):
            line = bounded(last_state(piece))
            if self.hide is None or not self.hide.match(line):
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
