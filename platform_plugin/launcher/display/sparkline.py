"""A rank's main metric as a small curve: `▁▂▃▄▅▆▇█` in text, an inline SVG in a notebook.

`Curve` keeps a rank's points in bounded memory: at most MAX_POINTS, each the mean of `stride`
consecutive points logged; when it fills up, neighbours are merged in pairs and the stride
doubles (so a job of a million steps keeps 128 points, evenly spread). The renderers are pure
functions of the points, the same for the foreground board, a background job's and attach.

The x axis is the step, over the job's highest step (`last_step`): a rank that stalled ends
short of the others; the y axis is the rank's own range, so each curve shows its direction. A
lower-is-better metric (a loss, an error, a time) that ends above where it started is drawn
in red in the SVG: a diverging rank stands out among falling ones.
"""
from __future__ import annotations

import html
import math

BLOCKS = "▁▂▃▄▅▆▇█"
MAX_POINTS = 128  # per curve: merged in pairs beyond this
TEXT_WIDTH = 16  # characters of a text curve
SVG_WIDTH, SVG_HEIGHT = 120, 22
RISING = "#c62828"  # a loss going up: red, as the board's failed status
FALLING = "#1565c0"  # the board's running colour


class Curve:
    """The points of one metric of one rank, bounded: (step, value) means of `stride` points."""

    def __init__(self, max_points: int = MAX_POINTS):
        self.max_points = max(2, max_points)
        self.points: list[tuple[int, float]] = []
        self.stride = 1
        self._bucket: list[float] = []  # the points of the bucket being filled
        self._last_step = 0  # the step of its latest point

    def add(self, step: int, value: float) -> None:
        if not math.isfinite(value):  # a NaN or inf loss: drawn at the top
            value = math.inf
        self._bucket.append(value)
        self._last_step = step
        if len(self._bucket) < self.stride:
            return
        self.points.append((step, _mean(self._bucket)))
        self._bucket = []
        if len(self.points) >= self.max_points:
            self.points = [(b[0], _mean([a[1], b[1]]))
                           for a, b in zip(self.points[::2], self.points[1::2])] + \
                (self.points[-1:] if len(self.points) % 2 else [])
            self.stride *= 2

    def values(self) -> list[tuple[int, float]]:
        """The points, and the bucket being filled as one more point."""
        if not self._bucket:
            return list(self.points)
        return self.points + [(self._last_step, _mean(self._bucket))]

    def __len__(self) -> int:
        return len(self.points) + (1 if self._bucket else 0)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else values[-1]


def _scaled(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """(step, 0..1 in the rank's own range) of the points; an infinite value at 1."""
    finite = [v for _, v in points if math.isfinite(v)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    span = high - low
    return [(s, (1.0 if not math.isfinite(v) or span == 0 and v > low else
                 0.5 if span == 0 else (v - low) / span)) for s, v in points]


def sparkline(points: list[tuple[int, float]], last_step: int | None = None,
              width: int = TEXT_WIDTH) -> str:
    """`width` block characters, one per column of steps up to `last_step` (the job's highest;
    the rank's own when None): the mean height of the column's points; blank after the rank's
    last step (it is behind the others)."""
    if not points:
        return ""
    first = points[0][0]
    end = max(last_step if last_step is not None else points[-1][0], points[-1][0])
    span = max(1, end - first)
    columns: list[list[float]] = [[] for _ in range(width)]
    for step, level in _scaled(points):
        columns[min(width - 1, int((step - first) * (width - 1) / span + 0.5))].append(level)
    reached = min(width - 1, int((points[-1][0] - first) * (width - 1) / span + 0.5))
    text, last = [], 0.0
    for i, levels in enumerate(columns[:reached + 1]):
        # a column between two points (fewer points than columns): the earlier one's height
        last = sum(levels) / len(levels) if levels else last
        text.append(BLOCKS[min(len(BLOCKS) - 1, int(last * len(BLOCKS)))])
    return "".join(text)


def rising(points: list[tuple[int, float]]) -> bool:
    """The curve ends above where it started (its last tenth's mean over its first tenth's)."""
    finite = [v for _, v in points if math.isfinite(v)]
    if len(finite) < 2:
        return bool(points) and not math.isfinite(points[-1][1])
    if not math.isfinite(points[-1][1]):
        return True
    tenth = max(1, len(finite) // 10)
    return _mean(finite[-tenth:]) > _mean(finite[:tenth])


def svg_sparkline(points: list[tuple[int, float]], last_step: int | None = None, *,
                  lower_is_better: bool = True, title: str = "",
                  width: int = SVG_WIDTH, height: int = SVG_HEIGHT) -> str:
    """An inline SVG of the curve: a polyline over steps up to `last_step`, a dot at its end,
    red when a lower-is-better metric ends above its start (the class says `rising` or
    `falling`, for a test or a style)."""
    if not points:
        return ""
    scaled = _scaled(points)
    first = points[0][0]
    end = max(last_step if last_step is not None else points[-1][0], points[-1][0])
    span = max(1, end - first)
    pad = 2
    xy = [(pad + (s - first) * (width - 2 * pad) / span, pad + (1 - level) * (height - 2 * pad))
          for s, level in scaled]
    if len(xy) == 1:
        xy.append(xy[0])
    up = rising(points)
    colour = RISING if up == lower_is_better else FALLING
    path = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    label = html.escape(title, quote=True)
    return (f"<svg class='curve {'rising' if up else 'falling'}' width='{width}' height='{height}'"
            f" viewBox='0 0 {width} {height}' role='img' aria-label='{label}'>"
            f"<title>{label}</title>"
            f"<path d='{path}' fill='none' stroke='{colour}' stroke-width='1.5'/>"
            f"<circle cx='{xy[-1][0]:.1f}' cy='{xy[-1][1]:.1f}' r='2' fill='{colour}'/></svg>")
