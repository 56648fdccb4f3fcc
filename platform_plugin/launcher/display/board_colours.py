"""A rank line's SGR colours (ESC [ ... m) as HTML spans for the board's tails.

Only what a log uses: the 8 + 8 bright foreground colours, bold, and their resets; 256-colour
and RGB codes, backgrounds and every other escape are dropped (the text stays). Anything
unknown shows as plain text: a colour is never worth a garbled line.
"""
from __future__ import annotations

import html
import re

from platform_plugin.launcher.display.screen_tail import ANSI

SGR = re.compile(rb"\x1b\[([0-9;]*)m")
# readable on JupyterLab's light and dark themes
PALETTE = ["#616161", "#c62828", "#2e7d32", "#a86b00", "#1565c0", "#8e24aa", "#00838f", "#9e9e9e"]
BRIGHT = ["#9e9e9e", "#e53935", "#43a047", "#f9a825", "#1e88e5", "#ab47bc", "#00acc1", "#bdbdbd"]


def _text(raw: bytes) -> str:
    return html.escape(ANSI.sub(b"", raw).decode("utf-8", errors="replace"))


def _apply(params: bytes, colour: str | None, bold: bool) -> tuple[str | None, bool]:
    codes = [int(p) if p else 0 for p in params.split(b";")] if params else [0]
    i = 0
    while i < len(codes):
        code = codes[i]
        if code == 0:
            colour, bold = None, False
        elif code == 1:
            bold = True
        elif code == 22:
            bold = False
        elif code == 39:
            colour = None
        elif 30 <= code <= 37:
            colour = PALETTE[code - 30]
        elif 90 <= code <= 97:
            colour = BRIGHT[code - 90]
        elif code in (38, 48):  # 256-colour / RGB: skip its arguments
            i += 2 if codes[i + 1:i + 2] == [5] else 4
        i += 1
    return colour, bold


def to_html(raw: bytes) -> str:
    """One line (bytes with escapes) as escaped HTML with coloured spans."""
    if b"\x1b" not in raw:
        return _text(raw)
    out, colour, bold, at = [], None, False, 0
    for match in SGR.finditer(raw):
        out.append(_span(_text(raw[at:match.start()]), colour, bold))
        colour, bold = _apply(match.group(1), colour, bold)
        at = match.end()
    out.append(_span(_text(raw[at:]), colour, bold))
    return "".join(out)


def _span(text: str, colour: str | None, bold: bool) -> str:
    if not text or (colour is None and not bold):
        return text
    style = (f"color:{colour};" if colour else "") + ("font-weight:bold" if bold else "")
    return f"<span style='{style}'>{text}</span>"
