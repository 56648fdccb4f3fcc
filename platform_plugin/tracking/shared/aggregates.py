"""Per-step aggregates across ranks for the job's parent run, computed as points arrive.

For every metric the ranks log, each step gets `NAME/mean`, `NAME/min`, `NAME/max` and, for a
throughput metric (`*samples_per_s*`, `*throughput*`, `*_per_s`), `NAME/sum` — the world's
samples/s. The forwarder feeds every batch it delivered (`add_batch`: one dict update per point;
completeness is decided once per metric and batch); a step is emitted once every
rank has a point for it or has moved past it (a rank that skips a step does not hold it back),
and what is still open when the job ends is emitted by `flush`. Only open steps are kept, so
memory is bounded by how far the ranks are apart, with a hard cap per metric (MAX_OPEN_STEPS)
for metrics some ranks never log.

A rank whose step goes back (a counter reset every epoch: `step=batch_index`) or comes again
(`step=epoch` logged every batch) starts a new pass over the steps: the n-th pass of every rank
is aggregated with the n-th pass of the others, as the children's histories hold them. A point
of a step already emitted (a rank more than MAX_OPEN_STEPS behind) is counted as `late` and left
out: one aggregate per step and pass.

What was sent is recorded in `aggregates.json` beside the spools (per aggregate key, the
highest step key sent), so `platform-run sync` recomputes the rest: it feeds the aggregator the
points delivered before it (read back from the spools, not sent again), then the points it
delivers, and sends every aggregate beyond that record - the steps open when a forwarding
helper died and every step after them. An aggregate the helper sent just before dying, before
its record was written, is sent again identically: the store ignores an exact repeat.

A job on several servers gets none of this while it runs (a server has only its own ranks):
its parent's aggregates are computed once, over every rank, when the parent ends
(sinks/mlflow_aggregates.py).
"""
from __future__ import annotations

import bisect
import dataclasses
import math
import os
import re
from typing import Any

from platform_plugin.tracking.shared.state import read_json, write_json_atomic

THROUGHPUT_WORDS = ("samples_per_s", "throughput")
MAX_OPEN_STEPS = 10_000  # per metric: beyond this the oldest step is emitted with what it has
# An open step's key orders (pass, step): step + OFFSET + pass * PASS. Steps are MLflow's int64.
OFFSET = 1 << 63
PASS = 1 << 64
# one device's metric (the launcher's system/npu_4_*, system/gpu_0_*): only its rank logs it
PER_DEVICE = re.compile(r"^system/(npu|gpu)_\d+_")
SENT_FILE = "aggregates.json"  # {"sent": {aggregate key: the highest step key sent}}


def is_throughput(name: str) -> bool:
    lowered = name.lower()
    return any(w in lowered for w in THROUGHPUT_WORDS) or lowered.endswith("_per_s")


def lower_is_better(metric: str) -> bool:
    """A loss, an error, a time: lower is better (compare's best, the board's curve colour)."""
    return any(word in metric.lower() for word in ("loss", "err", "perplexity", "time", "mse", "mae"))


def is_aggregate(name: str) -> bool:
    return name.rsplit("/", 1)[-1] in ("mean", "min", "max", "sum") and "/" in name


def aggregated(name: str) -> bool:
    """Whether a metric gets aggregates: not one that is itself an aggregate or one device's."""
    return not is_aggregate(name) and not PER_DEVICE.match(name)


@dataclasses.dataclass(frozen=True)
class AggregatePoint:
    """One point of the job run."""
    key: str
    value: float
    step: int
    timestamp_ms: int
    order: int = 0  # the step's key in its metric (pass and step): emitted in increasing order


class _Metric:
    """One metric's open steps. Per name, once: its aggregate keys and whether it gets a sum."""

    def __init__(self, name: str):
        self.open: dict[int, dict] = {}  # step key -> {label: (value, timestamp)}
        self.order: list[int] = []  # the open step keys, sorted
        self.top = -math.inf  # the highest open key: ranks log in step order, so mostly an append
        self.last_key: dict[str, int] = {}  # label -> the key of its latest step
        self.base: dict[str, int] = {}  # label -> OFFSET + its pass * PASS
        self.emitted = -math.inf  # the highest key emitted
        self.throughput = is_throughput(name)
        self.keys = tuple(f"{name}/{stat}" for stat in (STATS + ("sum",) if self.throughput else STATS))

    def open_step(self, step: int) -> dict:
        values: dict = {}
        self.open[step] = values
        if step > self.top:
            self.order.append(step)
            self.top = step
        else:
            bisect.insort(self.order, step)
        return values


STATS = ("mean", "min", "max")


def _summary(keys: tuple, step: int, values: list[float], timestamp_ms: int, order: int) -> list[AggregatePoint]:
    finite = [v for v in values if v == v]  # NaN is the one value unequal to itself
    if not finite:
        return []
    total = math.fsum(finite)
    out = [AggregatePoint(keys[0], total / len(finite), step, timestamp_ms, order),
           AggregatePoint(keys[1], min(finite), step, timestamp_ms, order),
           AggregatePoint(keys[2], max(finite), step, timestamp_ms, order)]
    if len(keys) > 3:
        out.append(AggregatePoint(keys[3], total, step, timestamp_ms, order))
    return out


class StepAggregator:
    """Not thread-safe: the forwarder calls it under its observers' lock."""

    def __init__(self, labels: Any) -> None:
        self.labels = frozenset(labels)
        self.metrics: dict[str, _Metric] = {}
        self.skipped: set[str] = set()  # names that get no aggregates (aggregated() is False)
        self.late = 0  # points of steps emitted before they came: left out
        self.outside = 0  # points whose step is no int64 (MLflow's step): left out

    def add(self, label: str, name: str, value: float, step: int, timestamp_ms: int) -> list[AggregatePoint]:
        """Record one delivered point; return the aggregates of the steps it completed."""
        return self.add_batch(label, [["m", name, value, step, timestamp_ms]])

    def add_batch(self, label: str, records: list[list]) -> list[AggregatePoint]:
        """Record one rank's delivered batch (spool records; only metrics count); return the
        aggregates of the steps it completed. The per-point work is one dict update: whether
        a step is complete is decided once per metric and batch."""
        touched: dict[str, _Metric] = {}
        metrics, skipped = self.metrics, self.skipped
        for record in records:
            if record[0] != "m" or record[1] in skipped:
                continue
            _, name, value, step, timestamp = record
            metric = metrics.get(name)
            if metric is None:
                if not aggregated(name):
                    skipped.add(name)
                    continue
                metric = metrics[name] = _Metric(name)
            step = int(step)
            if not -OFFSET <= step < OFFSET:  # its key would fall in another pass
                self.outside += 1
                continue
            key = step + metric.base.get(label, OFFSET)
            last = metric.last_key.get(label, -math.inf)
            if key <= last:  # the rank's step went back, or came again: its next pass (its
                # n-th point of a step goes with the others' n-th, whatever arrives first)
                base = metric.base[label] = metric.base.get(label, OFFSET) + PASS
                key = step + base
            values = metric.open.get(key)
            if values is None:
                if key <= metric.emitted:  # emitted without this rank (it was too far behind)
                    self.late += 1
                    continue
                values = metric.open_step(key)
            values[label] = (float(value), int(timestamp))
            if key > last:
                metric.last_key[label] = key
            touched[name] = metric
        out: list[AggregatePoint] = []
        for metric in touched.values():
            self._ready(metric, out)
        return out

    def _ready(self, metric: _Metric, out: list) -> None:
        """Emit the open steps every rank has reached (has a point for, or moved past): ranks
        log in step order, so that is every step up to the lowest rank's last step."""
        last = metric.last_key
        frontier = min((last.get(lb, -math.inf) for lb in self.labels), default=math.inf)
        order = metric.order
        done = bisect.bisect_right(order, frontier)
        over = len(order) - MAX_OPEN_STEPS  # too far apart: the oldest go with what they have
        self._emit(metric, max(done, over), out)

    def _emit(self, metric: _Metric, count: int, out: list) -> None:
        """Emit the `count` lowest open steps."""
        if count <= 0:
            return
        keys, open_ = metric.keys, metric.open
        for key in metric.order[:count]:
            values = open_.pop(key).values()
            step = (key & (PASS - 1)) - OFFSET
            out.extend(_summary(keys, step, [v for v, _ in values], max(t for _, t in values), key))
        metric.emitted = max(metric.emitted, metric.order[count - 1])
        del metric.order[:count]

    def flush(self) -> list[AggregatePoint]:
        """The job ended: emit every open step with the points it has."""
        out: list[AggregatePoint] = []
        for metric in self.metrics.values():
            self._emit(metric, len(metric.order), out)
        return out

    def open_steps(self) -> int:
        return sum(len(m.open) for m in self.metrics.values())


class JobAggregates:
    """Feeds the aggregator with what the forwarder delivered and ships the finished steps to
    the sink's job run. A failed send keeps them for the next pass; never raises."""

    def __init__(self, labels: Any, sink: Any, config: Any, batch: int = 1000, spool_dir: str | os.PathLike[str] | None = None) -> None:
        self.aggregator = StepAggregator(labels)
        self.sink, self.config, self.batch = sink, config, batch
        self.ready: list[AggregatePoint] = []
        self.sent = 0
        self.last_error = ""
        self.record = None if spool_dir is None else os.path.join(spool_dir, SENT_FILE)
        saved = read_json(self.record) if self.record else None
        # aggregate key -> the highest step key sent (by this process or an earlier one)
        self.sent_up_to: dict[str, int] = dict((saved or {}).get("sent", {}))

    def delivered(self, label: str, records: list[list]) -> None:
        """Points the store has (delivered now, or before: a sync reading them back)."""
        done = self.sent_up_to
        points = self.aggregator.add_batch(label, records)
        if done:
            points = [p for p in points if p.order > done.get(p.key, -OFFSET - 1)]
        self.ready.extend(points)

    def send(self, full_only: bool = False) -> bool:
        """Ship what is ready, `batch` points a call; `full_only`: only whole batches (while the
        ranks' points still flow: fewer, larger transactions)."""
        while self.ready and (len(self.ready) >= self.batch or not full_only):
            chunk = self.ready[:self.batch]
            try:
                self.sink.deliver_aggregates(self.config, chunk)
            except Exception as exc:  # noqa: BLE001 - aggregates never stop delivery
                self.last_error = f"aggregates: {type(exc).__name__}: {exc}"[:500]
                return False
            del self.ready[:len(chunk)]
            self.sent += len(chunk)
            self._sent(chunk)
        return True

    def _sent(self, chunk: list[AggregatePoint]) -> None:
        """Record the highest step key sent per aggregate key (a small file, once a chunk)."""
        done = self.sent_up_to
        for point in chunk:
            if point.order > done.get(point.key, -OFFSET - 1):
                done[point.key] = point.order
        if self.record is not None:
            try:
                write_json_atomic(self.record, {"sent": done})
            except OSError as exc:  # a full disk: a later sync sends these again (repeats: ignored)
                self.last_error = f"aggregates: cannot record what was sent: {exc}"[:500]

    def finish(self) -> bool:
        self.ready.extend(self.aggregator.flush())
        return self.send()

    def problems(self) -> str:
        """What the parent's aggregates lack, for the helper's log ("" when nothing)."""
        said = [self.last_error] if self.last_error else []
        if self.aggregator.late:
            said.append(f"aggregates: {self.aggregator.late} points came after their step was "
                        f"aggregated without them (a rank more than {MAX_OPEN_STEPS} steps behind "
                        "the others): the children have them, the parent's aggregates do not")
        if self.aggregator.outside:
            said.append(f"aggregates: {self.aggregator.outside} points with a step outside "
                        "MLflow's 64-bit range were left out")
        return "\n".join(said)


def batch_size(sink: Any, batches: int = 4) -> int:
    """Aggregates ship in batches as large as `batches` of the points' (a transaction each:
    aggregates are as many rows as the points)."""
    limits = sink.sql_limits if hasattr(sink, "sql_limits") else sink.limits
    return limits["m"] * batches


def job_aggregates(config: Any, sink: Any, spool_dir: str | os.PathLike[str], batches: int = 4) -> Any:
    """Per-step aggregates across ranks into the job's run (layout runs, a sink that has them),
    as the points are delivered. None for a job on several servers: a server has only its own
    ranks, and the parent gets the job-wide aggregates when it ends (mlflow_aggregates.py)."""
    if not (hasattr(sink, "deliver_aggregates") and config.layout == "runs" and config.job.get("parent")):
        return None
    if config.servers > 1:
        return None
    return JobAggregates(config.ranks, sink, config, batch=batch_size(sink, batches), spool_dir=spool_dir)
