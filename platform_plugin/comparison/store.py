"""The comparison's points from the tracking store, for the ranks that are not here: a job of
several servers (the ranks of the others are in the store only), a job whose folder is on
another machine (found by its job_id tag), a rank whose spool is gone. This is the path that
imports MLflow (seconds); a job that ran here is read from its spools (spools.py)."""
from __future__ import annotations

from platform_plugin.tracking.shared.attempts import by_attempt, stitched
from platform_plugin.comparison.table import JobRuns, Point
from platform_plugin.errors import ConfigError, Problem
from platform_plugin.tracking.shared.state import SinkConfig
from platform_plugin.tracking.sinks import mlflow_job
from platform_plugin.tracking.sinks.mlflow_refusals import access_refusal
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink


def client(uri: str) -> "CheckedClient":
    """MLflow's client of the store at `uri`, for reading a job's runs."""
    return CheckedClient(MlflowSink().client(uri), uri)


class CheckedClient:
    """MLflow's client, whose calls a server turns away for the credentials (HTTP 401/403)
    raise TRACKING_AUTH naming what to fix, not MLflow's exception with a traceback."""

    def __init__(self, mlflow_client, uri: str) -> None:
        self.mlflow_client, self.uri = mlflow_client, uri

    def __getattr__(self, name: str):
        attribute = getattr(self.mlflow_client, name)
        if not callable(attribute):
            return attribute

        def checked(*args, **kwargs):
            try:
                return attribute(*args, **kwargs)
            except Exception as exc:
                what_to_fix = access_refusal(exc, self.uri)
                if what_to_fix is None:
                    raise
                raise ConfigError([Problem("TRACKING_AUTH", what_to_fix,
                                           "MLFLOW_TRACKING_USERNAME")]) from None
        return checked


class StorePoints:
    """The points of a job's runs, read through MLflow's client (`get_metric_history`); a run
    that went on across attempts reads as one curve (tracking/shared/attempts.py)."""

    def __init__(self, runs: JobRuns, client) -> None:
        self.runs, self.client = runs, client
        self.starts: dict[str, list[int]] = {}  # run id -> its attempts' starts

    def history(self, run_id: str, key: str) -> list[Point]:
        """The run's points of `key`, the latest attempt's where attempts logged a step again."""
        if run_id not in self.starts:
            self.starts[run_id] = mlflow_job.attempt_starts(self.client.get_run(run_id).data.tags)
        points = [(m.step, m.value, m.timestamp) for m in self.client.get_metric_history(run_id, key)]
        return [Point(*p) for p in stitched(by_attempt(points, self.starts[run_id]))]

    def series(self, metric: str) -> dict[str, list[Point]]:
        return {label: self.history(run_id, self.runs.key(metric, label))
                for label, run_id in self.runs.run_ids.items()}

    def values(self, label: str, key: str) -> list[float]:
        run_id = self.runs.run_ids.get(label)
        if run_id is None:
            return []
        return [p.value for p in self.history(run_id, self.runs.key(key, label))]

    def metrics(self) -> list[str]:
        """The metrics the job's ranks logged (the ranks' own first, the launcher's system/ last)."""
        names: set[str] = set()
        for label, run_id in self.runs.run_ids.items():
            for key in self.client.get_run(run_id).data.metrics:
                if self.runs.config.layout == "flat":
                    if not key.endswith(f"-{label}"):
                        continue
                    key = key[:-len(label) - 1]
                names.add(key)
        return sorted(names, key=lambda k: (k.startswith("system/"), k))


def with_store_ranks(runs: JobRuns, client) -> JobRuns:
    """Every rank of the job from the tracking store - the ranks of the other servers too -
    when the job has a parent run there (layout runs); the local spool's view otherwise."""
    config = runs.config
    if config.layout != "runs" or not config.parent_run_id or not config.experiment_id:
        return runs
    children = mlflow_job.job_children(client, config.experiment_id, config.parent_run_id)
    if not children:
        return runs
    return JobRuns(config, {c.data.tags["rank_id"]: c.info.run_id for c in children},
                   {c.data.tags["rank_id"]: c.data.tags.get("server_id", "?") for c in children})


def job_runs_in_store(job_id: str, client, tracking_uri: str) -> JobRuns | None:
    """A job with no folder here (started on another server): found by its job_id tag."""
    parent = mlflow_job.find_job_parent(client, job_id)
    if parent is None:
        return None
    config = SinkConfig(sink="mlflow", tracking_uri=tracking_uri,
                        experiment_id=parent.info.experiment_id,
                        parent_run_id=parent.info.run_id, job={"job_id": job_id})
    return with_store_ranks(JobRuns(config, {}), client)
