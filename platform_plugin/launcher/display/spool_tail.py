"""The latest metrics of a rank, read from its tracking spool while the job runs (for the board).

The spool (tracking/rank/spool.py) is an append-only JSON-lines file: each refresh reads only the
bytes added since the last one, so following a rank costs nothing when it logs nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from platform_plugin.launcher.display.sparkline import Curve
from platform_plugin.tracking.rank.spool import SPOOL_SUFFIX, read_complete
from platform_plugin.tracking.shared.job_folders import spool_folder_name

READ_LIMIT = 4 << 20  # per refresh: a rank that logged more than this catches up next time


@dataclass
class RankMetrics:
    values: dict = field(default_factory=dict)  # key -> last value
    counts: dict = field(default_factory=dict)  # key -> points logged (the board's choice)
    step: int | None = None  # the highest step seen
    first: tuple | None = None  # (step, timestamp_ms) of the first metric point
    last: tuple | None = None  # (step, timestamp_ms) of the latest one
    # the curves the board can draw (sparkline.py, bounded): `loss` and the first metric logged
    curves: dict = field(default_factory=dict)

    @property
    def main(self) -> str | None:
        """The metric the board draws: loss, else the first one logged."""
        return "loss" if "loss" in self.curves else next(iter(self.curves), None)

    def main_curve(self) -> list:
        """The (step, value) points of the main metric's curve (sparkline.Curve)."""
        main = self.main
        return self.curves[main].values() if main is not None else []

    @property
    def steps_per_s(self) -> float | None:
        if not self.first or not self.last:
            return None
        seconds = (self.last[1] - self.first[1]) / 1000
        steps = self.last[0] - self.first[0]
        return steps / seconds if seconds > 0 and steps > 0 else None

    def add(self, key: str, value: float, step: int, timestamp_ms: int) -> None:
        self.values[key] = value
        curve = self.curves.get(key)
        if curve is None and (key == "loss" or not self.curves):
            curve = self.curves[key] = Curve()
        if curve is not None:
            curve.add(step, float(value))
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.step is None or step >= self.step:
            self.step = step
            self.last = (step, timestamp_ms)
        if self.first is None:
            self.first = (step, timestamp_ms)


class SpoolTail:
    """Follows `<job_dir>/tracking/rank_<name>.jsonl` of every rank (a restarted job's attempt:
    `tracking-attempt-<K>/`)."""

    def __init__(self, job_dir: str, attempt: int = 1):
        self.attempt = attempt
        self.folder = os.path.join(job_dir, spool_folder_name(attempt))  # the attempt's own
        self._offsets: dict[str, int] = {}
        self.metrics: dict[str, RankMetrics] = {}

    def refresh(self, names: Iterable[str]) -> None:
        for name in names:
            path = os.path.join(self.folder, f"rank_{name}{SPOOL_SUFFIX}")
            try:
                chunk = read_complete(path, self._offsets.get(name, 0), READ_LIMIT)
            except OSError:  # no spool (tracking none, or nothing logged yet)
                continue
            self._offsets[name] = chunk.end
            metrics = self.metrics.setdefault(name, RankMetrics())
            for record, _ in chunk.records:
                if record[0] == "m" and isinstance(record[2], (int, float)) \
                        and not str(record[1]).startswith("system/"):  # the launcher's samples
                    metrics.add(str(record[1]), record[2], int(record[3]), int(record[4]))
