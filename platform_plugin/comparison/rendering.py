"""What a comparison says of one metric, as text: the per-rank table (table.py) and, under it, a
line per flagged rank - why the straggler is slow, where a deviating rank's end value lies
(diagnosis.py). The one rendering `platform-run compare` prints and `%dist_compare` shows."""
from __future__ import annotations

from typing import Any

from platform_plugin.comparison import diagnosis
from platform_plugin.comparison.table import RankRow, render


def ranks_text(rows: list[RankRow], metric: str, points: Any, servers: dict[str, str] | None = None,
               unfinished: dict[str, str] | None = None) -> str:
    """`points` (spools.LocalPoints | store.StorePoints): the ranks' system metrics are read from
    it only when a straggler is flagged (from the store, a query per rank and metric).
    `servers` and `unfinished` as table.render takes them."""
    straggler = any("straggler" in row.flags for row in rows)
    system = diagnosis.system_summary(points.values, [row.label for row in rows]) if straggler else {}
    return "\n".join([render(rows, metric, servers, unfinished), *diagnosis.render(rows, system)])
