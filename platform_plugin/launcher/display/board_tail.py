"""A tail's lines as text without escapes: `ScreenTail.shown()` (screen_tail.py) for the failure
table's quote and the board's text, `ANSI` for the board's colours (board_colours.py).

ANSI escapes (colours, cursor moves) are removed: HTML and a quoted table would show them as
stray `[33m` text, or leave a terminal's colour on after the quote.
"""
from __future__ import annotations

import re

# CSI sequences (colours, cursor moves, erase line: tqdm's `\x1b[A`), OSC sequences (titles,
# links), lone two-byte escapes, and the other C0 controls a terminal would not print
ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                  rb"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def plain(line: bytes) -> str:
    return ANSI.sub(b"", line).decode("utf-8", errors="replace")
