"""Compare the ranks of a job: a per-rank table (final, best, steps, wall time, steps/s), the
straggler, ranks whose final value deviates, a plot, and the MLflow page overlaying all ranks."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from platform_plugin.errors import ConfigError
from platform_plugin.tracking.identity import run_name, stream_name
from platform_plugin.tracking.state import SinkConfig, StreamState


@dataclass(frozen=True)
class Point:
    step: int
    value: float
    timestamp_ms: int


@dataclass
class RankRow:
    label: str
    final: float
    best: float
    steps: int
    wall_s: float
    steps_per_s: float | None
    flags: list[str] = field(default_factory=list)
    end: float = 0.0  # mean of the last tenth of the points: what deviation is judged on


def lower_is_better(metric: str) -> bool:
    return any(word in metric.lower() for word in ("loss", "err", "perplexity", "time", "mse", "mae"))


def rank_rows(series: dict[str, list[Point]], metric: str, *, tolerance: float = 0.1) -> list[RankRow]:
    """Pure: one row per rank with points. Flags `straggler` on the slowest rank when it runs
    more than `tolerance` below the median rate, and `deviates` on a rank whose end value (the
    mean of its last tenth of points: in data parallel each rank's loss is over its own shard,
    so single points are noisy) is more than `tolerance` (relative) away from the median of the
    others' — with three ranks or more, since two ranks that differ have no odd one out."""
    pick = min if lower_is_better(metric) else max
    rows = []
    for label, points in series.items():
        if not points:
            continue
        points = sorted(points, key=lambda p: (p.step, p.timestamp_ms))
        wall = (points[-1].timestamp_ms - points[0].timestamp_ms) / 1000
        rate = (len(points) - 1) / wall if wall > 0 else None
        tail = points[-max(1, len(points) // 10):]
        rows.append(RankRow(label, points[-1].value, pick(p.value for p in points), len(points), wall,
                            rate, end=statistics.fmean(p.value for p in tail)))
    rows.sort(key=lambda r: (not r.label.isdigit(), int(r.label) if r.label.isdigit() else 0, r.label))
    if len(rows) < 2:
        return rows
    rated = [r for r in rows if r.steps_per_s is not None]
    if len(rated) >= 2:
        median_rate = statistics.median(r.steps_per_s for r in rated)
        slowest = min(rated, key=lambda r: r.steps_per_s)
        if slowest.steps_per_s < (1 - tolerance) * median_rate:
            slowest.flags.append("straggler")
    if len(rows) >= 3:
        for row in rows:
            if _apart(row.end, statistics.median(r.end for r in rows if r is not row), tolerance):
                row.flags.append("deviates")
    return rows


def _apart(value: float, reference: float, tolerance: float) -> bool:
    return abs(value - reference) > tolerance * max(abs(reference), 1e-12)


def render(rows: list[RankRow], metric: str) -> str:
    header = f"{'rank':<10}{'final ' + metric:>16}{'best':>12}{'steps':>8}{'wall s':>9}{'steps/s':>9}  flags"
    lines = [header, "-" * len(header)]
    for r in rows:
        rate = f"{r.steps_per_s:.2f}" if r.steps_per_s is not None else "-"
        lines.append(f"{run_name(r.label):<10}{r.final:>16.6g}{r.best:>12.6g}{r.steps:>8}"
                     f"{r.wall_s:>9.1f}{rate:>9}  {', '.join(r.flags)}")
    if not any("straggler" in r.flags for r in rows) and len(rows) > 1:
        lines.append("no straggler: every rank within tolerance of the median rate")
    return "\n".join(lines)


# --- reading MLflow ---------------------------------------------------------------------------
@dataclass
class JobRuns:
    config: SinkConfig
    run_ids: dict[str, str]  # label -> run id (all the parent's in layout "flat")

    def key(self, metric: str, label: str) -> str:
        return f"{metric}-{label}" if self.config.layout == "flat" else metric


def job_runs(spool_dir: Path) -> JobRuns:
    config = SinkConfig.load(spool_dir)
    if config is None or config.sink != "mlflow":
        raise ConfigError(f"{spool_dir}: compare needs a job tracked in MLflow", code="TRACKING_JOB")
    labels = sorted({p.name[len('rank_'):-len('.state.json')] for p in spool_dir.glob("rank_*.state.json")}
                    | set(config.ranks))
    runs = {lb: StreamState.load(spool_dir, stream_name(lb)).run_id for lb in labels}
    return JobRuns(config, {lb: rid for lb, rid in runs.items() if rid})


def load_series(runs: JobRuns, metric: str, client) -> dict[str, list[Point]]:
    return {label: [Point(m.step, m.value, m.timestamp)
                    for m in client.get_metric_history(run_id, runs.key(metric, label))]
            for label, run_id in runs.run_ids.items()}


def metric_url(ui: str, runs: JobRuns, metric: str) -> str:
    """The UI's own metric-page route (MLflow 3.17 `getMetricPageRoute`, hash router):
    `#/metric?runs=[...]&metric="loss"&experiments=[...]&plot_metric_keys=["loss"]`, plus
    `x_axis=step` so the ranks line up step by step (the page defaults to relative time)."""
    run_ids = sorted(set(runs.run_ids.values()))
    keys = sorted({runs.key(metric, lb) for lb in runs.run_ids})
    return (f"{ui.rstrip('/')}/#/metric?runs={json.dumps(run_ids, separators=(',', ':'))}"
            f"&metric={quote(json.dumps(keys[0]))}"
            f"&experiments={json.dumps([runs.config.experiment_id], separators=(',', ':'))}"
            f"&plot_metric_keys={quote(json.dumps(keys, separators=(',', ':')))}"
            "&x_axis=step")


def plot(series: dict[str, list[Point]], metric: str, path: Path, title: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label in sorted(series, key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0, x)):
        points = sorted(series[label], key=lambda p: p.step)
        ax.plot([p.step for p in points], [p.value for p in points], label=run_name(label))
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
