"""The comparison's table: the ranks of a job in one table (final, best, steps, wall time,
steps/s), the straggler, ranks whose final value deviates, a chart, and the MLflow page that
overlays all ranks. `platform-run compare` prints it; the notebook's view (view.py) shows it."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.tracking.shared.aggregates import is_throughput, lower_is_better
from platform_plugin.tracking.shared.state import SinkConfig, StreamState
from platform_plugin.tracking.rank.identity import run_name, stream_name


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
    steps: int  # points logged
    wall_s: float
    steps_per_s: float | None  # the metric's step axis per second (a throughput: its mean)
    flags: list[str] = field(default_factory=list)
    end: float = 0.0  # mean of the last tenth of the points: what deviation is judged on


DEFAULT_METRIC = "loss"  # what a training script logs most often (cli/flags.py shows it)
OUTLIER_Z = 3.5  # modified z-score (Iglewicz & Hoaglin) above which an end value is an outlier
MAD_TO_SIGMA = 1.4826


def check_tolerance(tolerance: float) -> None:
    """Before any store is opened: nan would never flag a straggler, inf never either."""
    if not 0 <= tolerance < float("inf"):  # also nan
        raise ConfigError([Problem("COMPARE_TOLERANCE", f"tolerance {tolerance}: give the "
                                   "relative gap as a number >= 0, e.g. 0.1", "--tolerance")])


def rate_label(metric: str) -> str:
    """A throughput metric is its own speed: its mean, not a step rate, is the pace column."""
    return f"mean {metric}" if is_throughput(metric) else "steps/s"


def _row(label: str, points: list[Point], metric: str) -> RankRow:
    pick = min if lower_is_better(metric) else max
    points = sorted(points, key=lambda p: (p.step, p.timestamp_ms))
    wall = (points[-1].timestamp_ms - points[0].timestamp_ms) / 1000
    rate: float | None
    if is_throughput(metric):
        rate = statistics.fmean(p.value for p in points)
    else:
        rate = (points[-1].step - points[0].step) / wall if wall > 0 else None
    tail = points[-max(1, len(points) // 10):]
    return RankRow(label, points[-1].value, pick(p.value for p in points), len(points), wall,
                   rate, end=statistics.fmean(p.value for p in tail))


def rank_order(label: str) -> tuple:
    """Ranks by number (rank-10 after rank-9), other labels after them."""
    return (not label.isdigit(), int(label) if label.isdigit() else 0, label)


def rank_rows(series: dict[str, list[Point]], metric: str, *, tolerance: float = 0.1) -> list[RankRow]:
    """Pure: one row per rank with points. Flags `straggler` on the slowest rank when it runs
    more than `tolerance` below the median pace, and `deviates` on an outlier end value (the
    mean of its last tenth of points: in data parallel each rank's loss is over its own shard,
    so single points are noisy) — see `deviating`. With three ranks or more: of two ranks that
    differ neither is the odd one out."""
    rows = [_row(label, points, metric) for label, points in series.items() if points]
    rows.sort(key=lambda r: rank_order(r.label))
    if len(rows) < 2:
        return rows
    rated = [(r.steps_per_s, r) for r in rows if r.steps_per_s is not None]
    if len(rated) >= 2:
        median_rate = statistics.median(rate for rate, _ in rated)
        slowest_rate, slowest = min(rated, key=lambda pair: pair[0])
        if slowest_rate < (1 - tolerance) * median_rate:
            slowest.flags.append("straggler")
    if len(rows) >= 3:
        for row in rows:
            if deviating(row.end, [r.end for r in rows if r is not row], tolerance):
                row.flags.append("deviates")
    return rows


def deviating(value: float, others: list[float], tolerance: float) -> bool:
    """An outlier among the other ranks: more than `tolerance` (relative) from their median AND
    more than OUTLIER_Z robust standard deviations (MAD) from it. The relative test alone fired
    on every rank of an 8-rank job: per-shard losses spread by more than 10 % by nature."""
    reference = statistics.median(others)
    gap = abs(value - reference)
    if gap <= tolerance * max(abs(reference), 1e-12):
        return False
    mad = statistics.median(abs(x - reference) for x in others)
    return mad == 0 or gap > OUTLIER_Z * MAD_TO_SIGMA * mad


def render(rows: list[RankRow], metric: str, servers: dict[str, str] | None = None,
           unfinished: dict[str, str] | None = None) -> str:
    """`servers` (label -> server id): a server column when the ranks ran on several servers.
    `unfinished` (label -> how it ended): ranks flagged `did not finish` (comparison/job_end.py).
    Every number to NUMBER_FORMAT; the last line says what the columns are."""
    unfinished = unfinished or {}
    servers = servers if servers and len(set(servers.values())) > 1 else {}
    column = max([len(v) for v in servers.values()] + [6]) + 2 if servers else 0
    pace = rate_label(metric)
    width = max(9, len(pace) + 2)
    value_width = max(12, len(metric) + 7)
    header = (f"{'rank':<10}" + (f"{'server':<{column}}" if servers else "")
              + f"{'last ' + metric:>{value_width}}{'best':>12}{'points':>8}"
              f"{'wall s':>9}{pace:>{width}}  flags")
    lines = [header, "-" * len(header)]
    for r in rows:
        rate = number(r.steps_per_s) if r.steps_per_s is not None else "-"
        server = f"{servers.get(r.label, '?'):<{column}}" if servers else ""
        lines.append(f"{run_name(r.label):<10}{server}{number(r.final):>{value_width}}"
                     f"{number(r.best):>12}{r.steps:>8}{r.wall_s:>9.1f}{rate:>{width}}  "
                     f"{', '.join(_flags(r, unfinished))}")
    if not any("straggler" in r.flags for r in rows) and len(rows) > 1:
        lines.append("no straggler: every rank within tolerance of the median pace")
    best = "lowest" if lower_is_better(metric) else "highest"
    lines.append(f"last: the rank's last logged {metric} (not an epoch mean); best: its {best}; "
                 f"{'mean of the throughput' if is_throughput(metric) else 'steps per second'}"
                 f"{'' if is_throughput(metric) else ' of wall time'}")
    return "\n".join(lines)


def _flags(row: RankRow, unfinished: dict[str, str]) -> list[str]:
    how = unfinished.get(row.label)
    return ([f"did not finish ({how})"] if how else []) + list(row.flags)


NUMBER_FORMAT = ".4g"  # 4 significant digits: the notebooks' tables print the same way


def number(value: float) -> str:
    return format(value, NUMBER_FORMAT)


# --- reading MLflow ---------------------------------------------------------------------------
@dataclass
class JobRuns:
    config: SinkConfig
    run_ids: dict[str, str]  # label -> run id (all the parent's in layout "flat")
    servers: dict[str, str] = field(default_factory=dict)  # label -> server id (from the store)

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


def no_such_metric(job_id: str, missing: list[str], known: list[str]) -> ConfigError:
    """COMPARE_METRIC for metrics no rank logged, naming the ones there are (the CLI and
    %dist_compare say it alike)."""
    return ConfigError([Problem("COMPARE_METRIC", f"{job_id}: no rank logged "
                                f"{', '.join(map(repr, missing))}; its metrics: "
                                f"{', '.join(known) or 'none'}", "--metric")])


def default_metric(known: list[str]) -> tuple[str, str | None]:
    """(the metric compared when none was asked for, the note that says why when it is not
    DEFAULT_METRIC): DEFAULT_METRIC when a rank logged it, else the first of the ranks' own
    metrics (system/ ones only when there is nothing else)."""
    if DEFAULT_METRIC in known or not known:
        return DEFAULT_METRIC, None
    chosen = known[0]
    return chosen, (f"no rank logged {DEFAULT_METRIC!r}: comparing {chosen!r}, the first of its "
                    f"metrics ({', '.join(known)}); --metric picks another")


def metric_url(ui: str, runs: JobRuns, metrics) -> str:
    """The UI's own metric-page route (MLflow 3.17 `getMetricPageRoute`, hash router):
    `#/metric?runs=[...]&metric="loss"&experiments=[...]&plot_metric_keys=["loss"]`, plus
    `x_axis=step` so the ranks line up step by step (the page defaults to relative time).
    Several metrics: one chart with every key."""
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    # in rank order: MLflow's legend lists the runs in the order of the URL
    run_ids = list(dict.fromkeys(runs.run_ids[lb] for lb in sorted(runs.run_ids, key=rank_order)))
    keys = [k for metric in metrics for k in sorted({runs.key(metric, lb) for lb in runs.run_ids})]
    return (f"{ui.rstrip('/')}/#/metric?runs={json.dumps(run_ids, separators=(',', ':'))}"
            f"&metric={quote(json.dumps(keys[0]))}"
            f"&experiments={json.dumps([runs.config.experiment_id], separators=(',', ':'))}"
            f"&plot_metric_keys={quote(json.dumps(keys, separators=(',', ':')))}"
            "&x_axis=step")


def table_data(rows: list[RankRow], metric: str) -> dict[str, list]:
    """The table as columns, for `MlflowClient.log_table` (the run's Evaluation/Artifacts view)."""
    return {"rank": [run_name(r.label) for r in rows], f"last {metric}": [r.final for r in rows],
            "best": [r.best for r in rows], "points": [r.steps for r in rows],
            "wall_s": [r.wall_s for r in rows], rate_label(metric): [r.steps_per_s for r in rows],
            "flags": [", ".join(r.flags) for r in rows]}


# MLflow 3.17's run colours (its UI's palette) and how its pages pick one for a run: a
# Fletcher-16 checksum of the run id. The chart draws each rank in its run's colour, so the
# chart and MLflow's page match; the palette is MLflow's, and so are its near-equal navies.
MLFLOW_RUN_COLOURS = ("#a6630c", "#c83243", "#b45091", "#8a63bf", "#434a93", "#137dae", "#04867d",
                      "#308613", "#facb66", "#1f272d", "#445461", "#5f7281", "#8396a5", "#93320b",
                      "#be501e", "#de7921", "#f2be88", "#115026", "#277c43", "#3ba65e", "#8ddda8",
                      "#9e102c", "#c82d4c", "#e65b77", "#f792a6", "#0e538b", "#2272b4", "#4299e0",
                      "#8acaff")
LINE_STYLES = ("-", "--", ":", "-.")


def mlflow_colour(run_id: str) -> str:
    low = high = 0
    for char in run_id:
        low = (low + ord(char)) % 255
        high = (high + low) % 255
    return MLFLOW_RUN_COLOURS[(low | high << 8) % len(MLFLOW_RUN_COLOURS)]


def run_colours(runs: JobRuns) -> dict[str, str]:
    """rank label -> the colour MLflow's pages draw its run in."""
    return {label: mlflow_colour(run_id) for label, run_id in runs.run_ids.items()}


def figure(series: dict[str, dict[str, list[Point]]], title: str,
           colours: dict[str, str] | None = None):
    """One chart per metric (`series`: metric -> rank -> points), stacked, ranks overlaid in
    rank order, each in `colours[label]` when given (its run's colour in MLflow). A matplotlib
    Figure made without pyplot: a notebook's inline backend is left alone."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 3.2 * len(series) + 1.3))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(series), 1, squeeze=False)
    for ax, (metric, per_rank) in zip(axes[:, 0], series.items()):
        seen: dict[str, int] = {}
        for label in sorted(per_rank, key=rank_order):
            points = sorted(per_rank[label], key=lambda p: p.step)
            colour = (colours or {}).get(label)
            style = LINE_STYLES[seen.get(colour, 0) % len(LINE_STYLES)] if colour else "-"
            if colour:  # MLflow gives some ranks one colour: the chart tells them apart by dashes
                seen[colour] = seen.get(colour, 0) + 1
            ax.plot([p.step for p in points], [p.value for p in points], label=run_name(label),
                    color=colour, linestyle=style)
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.legend(loc="best", fontsize="small")
    axes[0, 0].set_title(title)
    fig.tight_layout()
    return fig


def plot(series: dict[str, dict[str, list[Point]]], path: Path, title: str,
         colours: dict[str, str] | None = None) -> Path:
    figure(series, title, colours).savefig(path, dpi=100)
    return path
