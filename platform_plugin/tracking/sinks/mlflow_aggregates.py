"""The parent run's aggregates of a job on several servers: computed once, from the store.

Each server's forwarding helper has only its own ranks' points. Aggregates it computed would
be its share of the job, logged under the same parent keys as every other server's: one point
per server at each step. So in a job on several servers no helper sends aggregates while the
ranks run (aggregates.job_aggregates); the process that ends the parent - the one that finds
every server reported (mlflow_job.report_gone) - reads every rank run of the job from the
store, a run that went on across attempts stitched as `compare` reads it (the latest attempt
wins for a replayed step: tracking/shared/attempts.py), feeds the points through the same
aggregator with every rank of the job as a label, and sends the aggregates with the sink's
aggregate delivery before the parent ends. A `platform-run sync` that delivers points after
the parent ended computes them again: a step whose aggregates did not change is an exact
repeat the store ignores; a step whose value changed gets a second point.
"""
from __future__ import annotations

from typing import Any

from platform_plugin.tracking.shared.aggregates import JobAggregates, aggregated, batch_size
from platform_plugin.tracking.shared.attempts import by_attempt, stitched
from platform_plugin.tracking.shared.state import SinkConfig
from platform_plugin.tracking.sinks import mlflow_job
from platform_plugin.tracking.sinks.mlflow_writers import RunStore

FEED_SLICE = 1000  # points per rank and turn: the ranks advance together, so few steps stay open


def job_wide(client: RunStore, config: SinkConfig, sink: Any) -> str:
    """Aggregate every rank run of the job's parent (`client`: the sink's) and send them into
    the parent with `sink.deliver_aggregates`. Returns, and keeps in `sink.aggregates_problem`
    for its caller to say once, "" or what went wrong; never raises: the parent ends either way."""
    sink.aggregates_problem = problem = ""
    if config.layout != "runs" or not config.parent_run_id or not config.experiment_id:
        return ""
    try:
        children = mlflow_job.job_children(client, config.experiment_id, config.parent_run_id)
        runs = {run.data.tags["rank_id"]: run for run in children}
        aggregates = JobAggregates(runs, sink, config, batch=batch_size(sink))
        names = sorted({key for run in children for key in run.data.metrics if aggregated(key)})
        for name in names:  # one metric at a time: its every point is in, so it ends whole
            _feed(aggregates, name, {label: _history(client, run, name)
                                     for label, run in runs.items() if name in run.data.metrics})
            if not aggregates.finish():
                break
        problem = aggregates.problems()
    except Exception as exc:  # noqa: BLE001 - the aggregates never keep the parent open
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        sink.aggregates_problem = f"the parent run's job-wide aggregates are incomplete: {problem}"[:600]
    return sink.aggregates_problem


def when_parent_ended(sink: Any, config: SinkConfig, uri: str) -> str:
    """`platform-run sync` delivered points of a job on several servers: if its parent has
    ended (its job-wide aggregates were computed without them), compute them again."""
    sink.aggregates_problem = ""
    try:
        client = sink.client(uri)
        if client.get_run(config.parent_run_id).info.status == "RUNNING":
            return ""  # the server that ends it computes them then
    except Exception as exc:  # noqa: BLE001 - said by sync; the points are in the ranks' runs
        sink.aggregates_problem = (f"the parent run's job-wide aggregates are not updated: "
                                   f"{type(exc).__name__}: {exc}")[:600]
        return sink.aggregates_problem
    return job_wide(client, config, sink)


def _history(client: RunStore, run: Any, key: str) -> list[tuple]:
    """The run's (step, value, timestamp) of `key` in the order they were logged, the latest
    attempt's where attempts logged a step again (as `compare` reads them)."""
    points = sorted(((m.step, m.value, m.timestamp) for m in client.get_metric_history(run.info.run_id, key)),
                    key=lambda p: (p[2], p[0]))
    return stitched(by_attempt(points, mlflow_job.attempt_starts(run.data.tags)))


def _feed(aggregates: JobAggregates, name: str, series: dict[str, list[tuple]]) -> None:
    """One metric's points of every rank, FEED_SLICE per rank and turn."""
    start = 0
    while any(start < len(points) for points in series.values()):
        for label, points in series.items():
            part = points[start:start + FEED_SLICE]
            if part:
                aggregates.delivered(label, [["m", name, v, s, t] for s, v, t in part])
        start += FEED_SLICE
