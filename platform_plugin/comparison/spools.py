"""A local job's points from its own spool files: every point a rank logged is in its
`rank_<label>.jsonl` (tracking/rank/spool.py), so the comparison of a job that ran here needs
neither MLflow nor its store (MLflow's import alone takes seconds). The store is read only for
ranks that are not here: a job of several servers (the other servers' spools are on their
disks) or a rank whose spool is gone. A restarted job has a spool folder per attempt: its points
are read from all of them, stitched into one curve per rank (tracking/shared/attempts.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from platform_plugin.tracking.shared.attempts import stitched
from platform_plugin.comparison.table import Point
from platform_plugin.tracking.shared.state import SinkConfig
from platform_plugin.tracking.rank.identity import SPOOL_SUFFIX, stream_name
from platform_plugin.tracking.rank.spool import read_complete
from platform_plugin.util.regular_file import reason

READ_BYTES = 64 << 20  # one read per spool of a usual job; a larger spool takes several


@dataclass
class LocalPoints:
    """metric -> rank label -> [(step, value, timestamp_ms)], in the order the rank logged them."""
    by_metric: dict[str, dict[str, list[tuple[int, float, int]]]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)  # rank label -> why its spool was not read

    def series(self, metric: str) -> dict[str, list[Point]]:
        return {label: [Point(*point) for point in points]
                for label, points in self.by_metric.get(metric, {}).items()}

    def values(self, label: str, key: str) -> list[float]:
        return [point[1] for point in self.by_metric.get(key, {}).get(label, ())]

    def metrics(self) -> list[str]:
        """The ranks' own metrics first, the launcher's system/ ones last (as MLflow's are named)."""
        return sorted(self.by_metric, key=lambda k: (k.startswith("system/"), k))


def rank_labels(spool_dir: Path, config: SinkConfig) -> list[str]:
    """Every rank the job's sink.json names, or the spools there are when it names none."""
    found = {p.name[len("rank_"):-len(SPOOL_SUFFIX)] for p in spool_dir.glob(f"rank_*{SPOOL_SUFFIX}")}
    return sorted(set(config.ranks) | found)


def all_here(spool_dir: Path, config: SinkConfig) -> bool:
    """Whether this folder holds every rank of the job: one server, and a spool per rank."""
    if config.servers > 1:
        return False
    labels = rank_labels(spool_dir, config)
    return bool(labels) and all((spool_dir / f"{stream_name(lb)}{SPOOL_SUFFIX}").is_file()
                                for lb in labels)


def read_points(spool_dir: Path, labels: list[str]) -> LocalPoints:
    """Every metric point of the ranks' spools, in one pass over each file (complete lines
    only: a rank still writing leaves its last line for later)."""
    points = LocalPoints()
    for label in labels:
        path = spool_dir / f"{stream_name(label)}{SPOOL_SUFFIX}"
        offset = 0
        while True:
            try:
                chunk = read_complete(path, offset, READ_BYTES)
            except OSError as exc:  # gone, or no regular file of the folder (a FIFO, a link)
                points.unreadable[label] = reason(exc)
                break
            for record, _end in chunk.records:
                if record[0] == "m":
                    _kind, key, value, step, timestamp = record
                    points.by_metric.setdefault(key, {}).setdefault(label, []).append(
                        (step, value, timestamp))
            if chunk.end == offset:
                break
            offset = chunk.end
    return points


def read_attempts(spool_dirs: list[Path], labels: list[str]) -> LocalPoints:
    """`read_points` of every attempt's spool folder (in the attempts' order), each rank's
    metric stitched: the latest attempt wins for the steps it logged again."""
    if len(spool_dirs) == 1:
        return read_points(spool_dirs[0], labels)
    attempts = [read_points(folder, labels).by_metric for folder in spool_dirs]
    points = LocalPoints()
    for key in dict.fromkeys(k for by_metric in attempts for k in by_metric):
        for label in labels:
            series = stitched([by_metric.get(key, {}).get(label, []) for by_metric in attempts])
            if series:
                points.by_metric.setdefault(key, {})[label] = series
    return points
