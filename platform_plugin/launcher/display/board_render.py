"""The rank board as text and HTML (pure: a `BoardView` in, strings out).

One row per process (status, runtime, last step, last metric values, steps/s, last output
line), then each rank's last lines with the count held back. The text form is what a saved
notebook shows without HTML (papermill, nbconvert to text) and what the terminal shows.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

from platform_plugin.launcher.display.sparkline import sparkline, svg_sparkline
from platform_plugin.launcher.processes.result import name_label
from platform_plugin.tracking.shared.aggregates import is_throughput, lower_is_better
from platform_plugin.util.texttable import render_rows

LAST_LINE_CHARS = 60
TEXT_LINE_CHARS = 200  # a tail line in the text form (the log has it whole)
METRIC_CHARS = 52
MAX_METRICS = 4  # chosen for the column when the user names none (--board-metrics)
MIN_NAME_CHARS = 8  # a metric's name is shortened down to this before a metric is left out
# throughput names beyond what tracking aggregates as one (`samples/s`, `tokens_per_sec`)
RATE_ENDINGS = ("/s", "per_sec", "per_second", "_ps")
OK_STATUSES = ("running", "ok", "starting")


@dataclass
class RankRow:
    name: str  # "0", "1", ... or a helper process: "sched", "store"
    status: str  # starting | running | ok | exit N | SIGTERM ...
    runtime_s: float
    step: int | None = None
    metrics: dict = field(default_factory=dict)
    steps_per_s: float | None = None
    lines: int = 0  # lines the rank printed
    tail: list = field(default_factory=list)  # its last lines (decoded)
    tail_block: bool = True  # shown below the table (the last one is in its row anyway)
    tail_html: list | None = None  # the tail as escaped HTML with its colours (board_colours)
    curve_name: str | None = None  # the metric drawn in its row: loss, else the first logged
    curve: list = field(default_factory=list)  # its (step, value) points (sparkline.Curve)
    # a log followed from its end (attach: launcher/jobs/follow.py) too long to count its
    # lines at once: its size is what the board says of it
    log_bytes: int | None = None

    @property
    def label(self) -> str:  # as the prefix and the failure table name it: "rank 0", "store"
        return name_label(self.name)

    @property
    def held_back(self) -> int:
        return max(0, self.lines - len(self.tail))

    @property
    def counted(self) -> str:
        """"12 lines, 8 earlier lines in the log", "1 line" (not "1 lines")."""
        if self.log_bytes is not None:  # too long to count at once: its size, not a guess
            return (f"last {_lines(len(self.tail))} of a {_size(self.log_bytes)} log, "
                    "too long to count")
        text = _lines(self.lines)
        held = self.held_back
        return text + (f", {held} earlier {'line' if held == 1 else 'lines'} in the log"
                       if held else "")


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    if count < 1 << 20:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1 << 20):.1f} MiB" if count < 1 << 30 else f"{count / (1 << 30):.1f} GiB"


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"


@dataclass
class BoardView:
    title: str
    rows: list
    notes: list = field(default_factory=list)
    log_dir: str = ""
    final: bool = False
    metric_names: list = field(default_factory=list)  # the metrics column (choose_metrics)

    @property
    def last_step(self) -> int | None:
        """The highest step any rank's curve reached: every curve's x axis ends there, so a
        rank that stalled ends short of the others."""
        ends = [row.curve[-1][0] for row in self.rows if row.curve]
        return max(ends) if ends else None


def _number(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def is_rate(name: str) -> bool:
    return is_throughput(name) or name.lower().endswith(RATE_ENDINGS)


def choose_metrics(counts: list, wanted: tuple = (), limit: int = MAX_METRICS) -> list:
    """The metrics of the board's column, the same for every row: `wanted` (--board-metrics) as
    given, else the ones the ranks log most often (`counts`: each rank's name -> points, in the
    order it logged them), a throughput last - the one a user checks a job's pace by."""
    if wanted:
        return list(wanted)
    total: dict = {}
    for rank_counts in counts:
        for name, count in rank_counts.items():
            total[name] = total.get(name, 0) + count
    by_use = sorted(total, key=lambda name: -total[name])  # stable: first logged first on ties
    rates = [name for name in by_use if is_rate(name)][:1]
    others = [name for name in by_use if not is_rate(name)][:limit - len(rates)]
    return others + rates


def metrics_text(metrics: dict, names: list, width: int = METRIC_CHARS) -> str:
    """`names=value` of the chosen metrics in `width` characters: long names are shortened in
    the middle first (`vali…hes`), then the least logged metrics left out; the throughput at
    the end is never shortened nor left out."""
    items = [(name, _number(metrics[name])) for name in names if name in metrics]
    if not items:
        return ""
    longest = max(len(name) for name, _ in items)
    limit = longest
    while len(_joined(items, limit)) > width and limit > MIN_NAME_CHARS:
        limit -= 1
    while len(_joined(items, limit)) > width and len(items) > 1:
        del items[-2 if is_rate(items[-1][0]) else -1]
    while limit < longest and len(_joined(items, limit + 1)) <= width:  # room again
        limit += 1
    return _clip(_joined(items, limit), width)


def _joined(items: list, limit: int) -> str:
    last = len(items) - 1
    return " ".join(f"{name if i == last and is_rate(name) else _middle(name, limit)}={value}"
                    for i, (name, value) in enumerate(items))


def _middle(name: str, limit: int) -> str:
    if len(name) <= limit:
        return name
    tail = (limit - 1) // 2
    return name[:limit - 1 - tail] + "…" + name[len(name) - tail:]


def _clip(text: str, width: int) -> str:
    text = text.replace("\t", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _cells(row: RankRow, names: list, last_step: int | None = None) -> tuple:
    rate = f"{row.steps_per_s:.2f}" if row.steps_per_s is not None else ""
    last = row.tail[-1] if row.tail else ""
    if row.tail and not row.tail_block:  # the root cause: its last lines are quoted below, once
        last = "(its last lines: in the root cause below)"
    return (row.label, row.status, f"{row.runtime_s:.0f}s", "" if row.step is None else
            str(row.step), metrics_text(row.metrics, names), sparkline(row.curve, last_step),
            rate, _clip(last, LAST_LINE_CHARS))


HEADERS = ["process", "status", "time", "step", "metrics", "curve", "steps/s", "last line"]
CURVE_COLUMN = HEADERS.index("curve")


def curve_title(row: RankRow) -> str:
    """What the curve shows, for its tooltip: `rank 0: loss 2.3 → 0.41 (steps 1-16)`."""
    if not row.curve:
        return ""
    (first_step, first), (last_step, last) = row.curve[0], row.curve[-1]
    return (f"{row.label}: {row.curve_name} {_number(first)} → {_number(last)} "
            f"(steps {first_step}-{last_step})")


def _curve_html(row: RankRow, last_step: int | None) -> str:
    return svg_sparkline(row.curve, last_step, title=curve_title(row),
                         lower_is_better=lower_is_better(row.curve_name or ""))


def render_text(view: BoardView) -> str:
    last_step = view.last_step
    lines = [view.title, render_rows(HEADERS, [_cells(r, view.metric_names, last_step)
                                               for r in view.rows], indent="  ")]
    lines += [f"  {note}" for note in view.notes]
    for row in view.rows:
        if not (row.tail and row.tail_block):
            continue
        lines.append(f"-- {row.label} ({row.counted}) --")
        # the HTML clips a line to its box; plain text (papermill, nbconvert) gets a clip too
        lines += [f"  {_clip(line, TEXT_LINE_CHARS)}" for line in row.tail]
    return "\n".join(lines)


_STYLE = ("<style>.ppb{font:12px/1.35 var(--jp-code-font-family,monospace);}"
          ".ppb table{border-collapse:collapse;margin:2px 0 6px}"
          ".ppb th,.ppb td{padding:1px 8px;text-align:left!important;white-space:pre;border-bottom:"
          "1px solid rgba(128,128,128,.25)}"
          ".ppb .bad{color:#c62828;font-weight:bold}.ppb .ok{color:#2e7d32}"
          ".ppb .run{color:#1565c0}"
          ".ppb .tails{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));"
          "gap:4px 12px}.ppb .tail{overflow:hidden}.ppb .tail pre{margin:0;white-space:pre;"
          "overflow:hidden;text-overflow:ellipsis;background:rgba(128,128,128,.08);padding:2px 4px}"
          ".ppb .head{color:gray}.ppb td.curve{padding:0 8px;line-height:0}</style>")


def _status_class(status: str) -> str:
    if status == "ok":
        return "ok"
    return "run" if status in OK_STATUSES else "bad"


def render_html(view: BoardView) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in HEADERS)
    body = []
    last_step = view.last_step
    for row in view.rows:
        cells = list(_cells(row, view.metric_names, last_step))
        tds = [f"<td>{esc(c)}</td>" for c in cells]
        tds[1] = f"<td class='{_status_class(row.status)}'>{esc(row.status)}</td>"
        tds[CURVE_COLUMN] = f"<td class='curve'>{_curve_html(row, last_step)}</td>"
        body.append("<tr>" + "".join(tds) + "</tr>")
    parts = [_STYLE, "<div class='ppb'>", f"<div><b>{esc(view.title)}</b></div>",
             f"<table><tr>{head}</tr>{''.join(body)}</table>"]
    parts += [f"<div class='head'>{esc(note)}</div>" for note in view.notes]
    tails = []
    for row in view.rows:
        if not (row.tail and row.tail_block):
            continue
        tails.append(f"<div class='tail'><div class='head'>{esc(row.label)} ({esc(row.counted)})"
                     f"</div><pre>{_tail_html(row)}</pre></div>")
    if tails:
        parts.append(f"<div class='tails'>{''.join(tails)}</div>")
    parts.append("</div>")
    return "".join(parts)


def _tail_html(row: RankRow) -> str:
    if row.tail_html is not None:
        return "\n".join(row.tail_html)
    return html.escape("\n".join(row.tail))
