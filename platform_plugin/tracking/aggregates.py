"""Per-step aggregates across ranks for the job's parent run, computed as points arrive.

For every metric the ranks log, each step gets `NAME/mean`, `NAME/min`, `NAME/max` and, for a
throughput metric (`*samples_per_s*`, `*throughput*`, `*_per_s`), `NAME/sum` — the world's
samples/s. The forwarder feeds every point it delivered (`add`); a step is emitted once every
rank has a point for it or has moved past it (a rank that skips a step does not hold it back),
and what is still open when the job ends is emitted by `flush`. Only open steps are kept, so
memory is bounded by how far the ranks are apart, with a hard cap per metric (MAX_OPEN_STEPS)
for metrics some ranks never log.

Not persisted: if the launcher dies mid-job, the parent lacks the aggregates of the steps still
open then (the children's points are complete either way; `platform-run sync` does not
recompute aggregates).
"""
from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field

THROUGHPUT_WORDS = ("samples_per_s", "throughput")
MAX_OPEN_STEPS = 10_000  # per metric: beyond this the oldest step is emitted with what it has
# one device's metric (the launcher's system/npu_4_*, system/gpu_0_*): only its rank logs it
PER_DEVICE = re.compile(r"^system/(npu|gpu)_\d+_")


def is_throughput(name: str) -> bool:
    lowered = name.lower()
    return any(w in lowered for w in THROUGHPUT_WORDS) or lowered.endswith("_per_s")


def is_aggregate(name: str) -> bool:
    return name.rsplit("/", 1)[-1] in ("mean", "min", "max", "sum") and "/" in name


def aggregated(name: str) -> bool:
    """Whether a metric gets aggregates: not one that is itself an aggregate or one device's."""
    return not is_aggregate(name) and not PER_DEVICE.match(name)


@dataclass(frozen=True)
class AggregatePoint:
    key: str
    value: float
    step: int
    timestamp_ms: int


@dataclass
class _Metric:
    open: dict = field(default_factory=dict)  # step -> {label: (value, timestamp)}
    order: list = field(default_factory=list)  # the open steps, sorted
    last_step: dict = field(default_factory=dict)  # label -> highest step seen


def summarise(name: str, step: int, values: list[float], timestamp_ms: int) -> list[AggregatePoint]:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return []
    out = [AggregatePoint(f"{name}/mean", math.fsum(finite) / len(finite), step, timestamp_ms),
           AggregatePoint(f"{name}/min", min(finite), step, timestamp_ms),
           AggregatePoint(f"{name}/max", max(finite), step, timestamp_ms)]
    if is_throughput(name):
        out.append(AggregatePoint(f"{name}/sum", math.fsum(finite), step, timestamp_ms))
    return out


class StepAggregator:
    """Not thread-safe: the forwarder thread (or, after it stopped, the drain) calls it."""

    def __init__(self, labels):
        self.labels = frozenset(labels)
        self.metrics: dict[str, _Metric] = {}
        self.skipped: set[str] = set()  # names that get no aggregates (aggregated() is False)

    def add(self, label: str, name: str, value: float, step: int, timestamp_ms: int) -> list[AggregatePoint]:
        """Record one delivered point; return the aggregates of the steps it completed."""
        metric = self.metrics.get(name)
        if metric is None:
            if name in self.skipped or not aggregated(name):
                self.skipped.add(name)
                return []
            metric = self.metrics[name] = _Metric()
        if step not in metric.open:
            metric.open[step] = {}
            bisect.insort(metric.order, step)  # ranks log in step order: an append, mostly
        metric.open[step][label] = (float(value), int(timestamp_ms))
        if step > metric.last_step.get(label, -math.inf):
            metric.last_step[label] = step
        return self._ready(name, metric)

    def _ready(self, name: str, metric: _Metric) -> list[AggregatePoint]:
        out = []
        everyone = len(self.labels)
        while metric.order:
            step = metric.order[0]
            values = metric.open[step]
            done = len(values) >= everyone or all(  # the usual case first: every rank has it
                lb in values or metric.last_step.get(lb, -math.inf) > step for lb in self.labels)
            if not done and len(metric.order) <= MAX_OPEN_STEPS:
                break  # steps complete in order: a later one cannot be done before this one
            out.extend(self._emit(name, metric, step))
        return out

    def _emit(self, name: str, metric: _Metric, step: int) -> list[AggregatePoint]:
        del metric.order[metric.order.index(step)]  # the first one, always
        values = metric.open.pop(step)
        return summarise(name, step, [v for v, _ in values.values()], max(t for _, t in values.values()))

    def flush(self) -> list[AggregatePoint]:
        """The job ended: emit every open step with the points it has."""
        out = []
        for name, metric in self.metrics.items():
            while metric.order:
                out.extend(self._emit(name, metric, metric.order[0]))
        return out

    def open_steps(self) -> int:
        return sum(len(m.open) for m in self.metrics.values())


class JobAggregates:
    """Feeds the aggregator with what the forwarder delivered and ships the finished steps to
    the sink's job run. A failed send keeps them for the next pass; never raises."""

    def __init__(self, labels, sink, config, batch: int = 1000):
        self.aggregator = StepAggregator(labels)
        self.sink, self.config, self.batch = sink, config, batch
        self.ready: list[AggregatePoint] = []
        self.sent = 0
        self.last_error = ""

    def delivered(self, label: str, records: list[list]) -> None:
        for record in records:
            if record[0] == "m":
                _, name, value, step, timestamp = record
                self.ready.extend(self.aggregator.add(label, name, value, int(step), timestamp))

    def send(self) -> bool:
        while self.ready:
            chunk = self.ready[:self.batch]
            try:
                self.sink.deliver_aggregates(self.config, chunk)
            except Exception as exc:  # noqa: BLE001 - aggregates never stop delivery
                self.last_error = f"aggregates: {type(exc).__name__}: {exc}"[:500]
                return False
            del self.ready[:len(chunk)]
            self.sent += len(chunk)
        return True

    def finish(self) -> bool:
        self.ready.extend(self.aggregator.flush())
        return self.send()
