"""Plain-text tables for the terminal: `platform-run env`, `ranktable show`, `doctor`."""
from __future__ import annotations

from typing import Sequence


def render_rows(headers: Sequence[str], rows: Sequence[Sequence[object]], *,
                indent: str = "") -> str:
    """Left-aligned columns sized to their content; None shows as "-"."""
    cells = [[str("-" if c is None else c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = [headers] + [["-" * w for w in widths]] + cells
    return "\n".join(indent + "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
                     for line in lines)
