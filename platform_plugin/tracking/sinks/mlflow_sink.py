"""MLflow sink: one parent run per job and one child run per rank (layout "runs"), or every
rank in the job's run with keys suffixed `-{RANK_ID}` (layout "flat").

A store is first opened (MLflow creates and migrates a fresh sqlite store on open) under a
cross-process lock beside the sqlite file: several launchers opening one fresh store at once
race on the migration (`duplicate column name: step`) and can leave it unopenable. Metric
points go through the store's writer, chosen once from its URI (`mlflow_writers`): into SQL
stores one INSERT per batch, into a server with the bulk route one request per batch, the rest
through MLflow's `log_batch`."""
from __future__ import annotations

import fcntl
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import urlparse

from platform_plugin.errors import PlatformPluginError
from platform_plugin.tracking.shared.job_folders import later_attempt
from platform_plugin.tracking.shared.state import SinkConfig, StreamState, stream_lock
from platform_plugin.tracking.shared import conventions
from platform_plugin.tracking.shared.uri_check import sqlite_file
from platform_plugin.tracking.rank.identity import run_name, stream_name
from platform_plugin.tracking.sinks import mlflow_aggregates, mlflow_end, mlflow_job, mlflow_refusals, mlflow_rest, sqlite_seed
from platform_plugin.tracking.sinks.mlflow_bulk import BulkRoute
from platform_plugin.tracking.shared.aggregates import AggregatePoint
from platform_plugin.tracking.sinks.mlflow_conventions import (EXPERIMENT_KIND, EXPERIMENT_KIND_TAG,
    migrations_keep_logging, quiet, standard_tags)
from platform_plugin.tracking.sinks.mlflow_writers import Opening, Point, RunStore, StoreWriter, open_writer

PARENT_TAG = "mlflow.parentRunId"
LOG_FILE = "mlflow.log"  # MLflow's own console output, kept out of the user's cell


def default_tracking_uri(cwd: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """MLFLOW_TRACKING_URI, else an embedded store next to CODE/ (see conventions.py)."""
    return conventions.default_store(cwd, os.environ if environ is None else environ)[0]


def sqlite_path(uri: str) -> Path | None:
    file = sqlite_file(uri)
    return None if file is None else Path(file)


def store_uri(config: SinkConfig) -> str:
    """The job's MLflow store. The launcher always names it in an MLflow job's sink.json;
    a file without it (edited by hand) is refused instead of opening some default store."""
    if not config.tracking_uri:
        raise PlatformPluginError("the job's tracking/sink.json names no MLflow tracking URI")
    return config.tracking_uri


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Serialise store opening between processes: several processes opening a fresh sqlite
    store at once race on its schema migration and corrupt it (measured with 8 ranks and with
    3 launchers). Nothing to lock for an http store (the server opens it once)."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class MlflowSink:
    name = "mlflow"
    limits = {"m": 1000, "p": 100, "t": 100, "a": 1, "total": 1000}  # MLflow's log_batch limits
    # metrics into a SQL store (mlflow_sql) or a server with the bulk route (mlflow_bulk) skip
    # log_batch: fewer, larger transactions
    sql_limits = {"m": 10000, "p": 100, "t": 100, "a": 1, "total": 10000}

    def batch_limits(self, config: SinkConfig) -> dict[str, int]:
        """Called once the store is open (after ensure_runs)."""
        return self.sql_limits if self.writer(store_uri(config)).takes_batches() else self.limits

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}
        self._log_path: Path | None = None  # the job's tracking folder / mlflow.log
        self._tags: dict[str, dict[str, str]] = {}
        self._bulk = BulkRoute()  # an http store's bulk route (mlflow_bulk.py), asked once
        self._writers: dict[str, StoreWriter] = {}  # writer(): one per store
        self._transports: dict[str, mlflow_rest.Transport] = {}  # one per server: _transport()
        self.aggregates_problem = ""  # what the job-wide aggregates lack: mlflow_aggregates.py

    def client(self, uri: str) -> Any:
        """MLflow's client of the store (opened once: compare, the UI, the writers' runs)."""
        if uri not in self._clients:
            from mlflow.tracking import MlflowClient
            from mlflow.version import VERSION
            # the first open creates/migrates a fresh store: one process at a time, and
            # without MLflow 3.1's migration reconfiguring this process's logging
            with store_lock(uri), migrations_keep_logging():
                db = sqlite_path(uri)
                fresh = db is not None and not db.exists()
                seeded = fresh and db is not None and sqlite_seed.seed(db, VERSION)
                self._clients[uri] = MlflowClient(tracking_uri=uri)
                if fresh and not seeded and db is not None and db.exists():
                    sqlite_seed.keep_template(db, VERSION)  # the next fresh store is a copy
        return self._clients[uri]

    def writer(self, uri: str) -> StoreWriter:
        """The store's writer, chosen once from its URI (mlflow_writers.open_writer)."""
        if uri not in self._writers:
            self._writers[uri] = open_writer(uri, Opening(self.client, self._transport, self._bulk))
        return self._writers[uri]

    def unavailable(self, config: SinkConfig) -> str | None:
        uri = config.tracking_uri or ""
        if urlparse(uri).scheme not in ("http", "https"):
            import mlflow.tracking  # noqa: F401 - imports MLflow once; the store opens in ensure_runs
            return None  # a local store is always there
        return self._transport(uri).healthy()  # a stdlib probe with the client's TLS settings

    def _transport(self, uri: str) -> mlflow_rest.Transport:
        """One per server for the health probe and the REST client: the credentials read and
        the TLS context made once."""
        if uri not in self._transports:
            self._transports[uri] = mlflow_rest.Transport(uri)
        return self._transports[uri]

    def _quiet(self, uri: str, log_path: Path | None = None) -> AbstractContextManager[Any]:
        """The writer's quiet() (MLflow's console lines to mlflow.log); a store MLflow's client
        opens is quieted from before it opens."""
        if not mlflow_rest.usable(uri):
            return quiet(log_path or self._log_path)
        return self.writer(uri).quiet(log_path or self._log_path)

    # --- runs -------------------------------------------------------------------------------
    def ensure_runs(self, config: SinkConfig, spool_dir: Path, labels: list[str]) -> None:
        """Create what is missing. Idempotent across processes: the forwarding helper and a
        `sync` of the same job take the spool's `runs` lock and re-read the ids on disk, so a
        job never gets two parent runs; launchers sharing a store take the store's lock, so
        they never create one experiment twice. The store's first open happens here."""
        self._log_path = Path(spool_dir) / LOG_FILE
        missing = [label for label in labels
                   if StreamState.load(spool_dir, stream_name(label)).run_id is None]
        if config.experiment_id and (config.parent_run_id or not config.job.get("parent")) and not missing:
            return
        uri = store_uri(config)
        with self._quiet(uri), stream_lock(spool_dir, "runs", blocking=True):
            writer = self.writer(uri)  # opens the store under its own lock
            saved = SinkConfig.load(spool_dir)
            if saved is not None:
                config.experiment_id = config.experiment_id or saved.experiment_id
                config.parent_run_id = config.parent_run_id or saved.parent_run_id
            if config.experiment_id is None:
                config.experiment_id = self._experiment(writer, config)
                config.save(spool_dir)
            if config.job.get("parent") and config.parent_run_id is None:
                if later_attempt(spool_dir):  # `sync` of an earlier attempt: the runs may exist
                    config.job["restarted"] = True
                config.parent_run_id = self._parent_run(writer, config)
                config.save(spool_dir)
                if mlflow_job.restart(config.job) and not config.job.get("node_rank"):  # a restart:
                    self._mark_attempt(writer, config, config.parent_run_id)  # where it begins
            self._rank_runs(writer, config, spool_dir, missing)

    def _rank_runs(self, writer: StoreWriter, config: SinkConfig, spool_dir: Path, labels: list[str]) -> None:
        """One run per rank without one. Into a server, several at once (each is a request
        the server spends ORM work on: one after the other, they hold up the job's start)."""
        todo = [label for label in labels
                if StreamState.load(spool_dir, stream_name(label)).run_id is None]
        self._standard_tags(config)  # the git lookup once, before any thread needs it

        def create(label: str) -> None:
            with self._quiet(store_uri(config)):
                state = StreamState.load(spool_dir, stream_name(label))
                state.run_id = self._run_for_rank(writer.runs, config, label)
                state.save(spool_dir, stream_name(label))
        if len(todo) > 1 and urlparse(store_uri(config)).scheme in ("http", "https"):
            with ThreadPoolExecutor(min(8, len(todo)), thread_name_prefix="tracking-runs") as pool:
                list(pool.map(create, todo))
        else:
            for label in todo:
                create(label)

    def _standard_tags(self, config: SinkConfig) -> dict[str, str]:
        key = config.job.get("job_id", "")
        if key not in self._tags:  # a git lookup: once per job
            self._tags[key] = standard_tags(config.job)
        return self._tags[key]

    def _parent_run(self, writer: StoreWriter, config: SinkConfig) -> str:
        """Named after the job and its start time (the job id: unique, sorts by time), with
        MLflow's standard tags and a notebook run's parameters as params."""
        runs, job = writer.runs, config.job
        tags = {**job.get("tags", {}), **self._standard_tags(config),
                mlflow_job.ROLE_TAG: mlflow_job.ROLE_JOB}

        def create() -> str:
            run = runs.create_run(str(config.experiment_id),
                                  run_name=job.get("run_name") or job["job_name"], tags=tags)
            # checked before anything is sent with it: an empty id would go out as the run
            run_id = _answered(run.info.run_id, "run id", store_uri(config))
            params = [writer.param(k, v) for k, v in sorted(job.get("params", {}).items())]
            for start in range(0, len(params), self.limits["p"]):
                runs.log_batch(run_id, params=params[start:start + self.limits["p"]])
            return run_id
        if config.servers > 1 and job.get("node_rank", 0) == 0:
            return mlflow_job.node_0_parent(runs, config, create)  # the one creator
        if config.servers > 1:
            awaited = mlflow_job.awaited_parent(runs, config)
            if awaited:
                return awaited
        if config.servers > 1 or mlflow_job.restart(job) or job.get("restarted"):
            return mlflow_job.shared_parent(runs, config, create)  # no node 0 parent: race
        return create()

    def _experiment(self, writer: StoreWriter, config: SinkConfig) -> str:
        name, runs = config.experiment_name, writer.runs
        if name is None:  # the launcher always names it; a sink.json edited by hand may not
            raise PlatformPluginError("the job's tracking/sink.json names no MLflow experiment")
        found = runs.get_experiment_by_name(name)
        if found is None:
            db = sqlite_path(store_uri(config))
            location = (db.parent / "mlartifacts").as_uri() if db else None
            try:
                experiment_id = runs.create_experiment(name, artifact_location=location)
            except writer.errors():  # created meanwhile by another process
                experiment_id = runs.get_experiment_by_name(name).experiment_id
        else:
            experiment_id = found.experiment_id
        experiment_id = _answered(experiment_id, "experiment id", store_uri(config))
        runs.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return experiment_id

    def _run_for_rank(self, runs: RunStore, config: SinkConfig, label: str) -> str:
        if config.layout == "flat" and config.parent_run_id:
            return config.parent_run_id
        info = config.ranks.get(label, {})
        tags = {k: str(v) for k, v in info.items() if k in ("rank_id", "device_id", "server_id",
                                                            "host") and v is not None}
        tags["job_id"] = config.job.get("job_id", "")
        tags.update(self._standard_tags(config))  # "Created by" and "Source" on every run
        tags.update(mlflow_job.attempt_tags(config))
        if config.parent_run_id:
            tags[PARENT_TAG] = config.parent_run_id
            name = run_name(label)
            # a restarted attempt goes on in the rank's run: one curve per rank (docs/tracking.md)
            earlier = (mlflow_job.rank_run(runs, config, tags.get("rank_id", label))
                       if mlflow_job.restart(config.job) or config.job.get("restarted") else None)
            if earlier and mlflow_job.restart(config.job):
                self._mark_attempt(self.writer(store_uri(config)), config, earlier)
                runs.update_run(earlier, "RUNNING")
            if earlier:  # (an earlier attempt's points, synced late, go there too)
                return earlier
        else:  # a process logging without the launcher: its own top-level run
            tags.update(config.job.get("tags", {}))
            name = config.job.get("job_name", "run") if label == "no-rank" else run_name(label)
        run_id = runs.create_run(str(config.experiment_id), run_name=name, tags=tags).info.run_id
        return _answered(run_id, "run id", store_uri(config))

    def _mark_attempt(self, writer: StoreWriter, config: SinkConfig, run_id: str) -> None:
        """This attempt's tags (mlflow_job.attempt_tags) on a run an earlier attempt made."""
        writer.runs.log_batch(run_id, tags=[writer.tag(k, v) for k, v in mlflow_job.attempt_tags(config).items()])

    # --- delivery ---------------------------------------------------------------------------
    def deliver(self, config: SinkConfig, label: str, state: StreamState,
                records: list[list]) -> None:
        writer = self.writer(store_uri(config))
        suffix = f"-{label}" if config.layout == "flat" else ""
        points: list[Point] = []
        params, tags, artifacts = [], [], []
        for record in records:
            kind = record[0]
            if kind == "m":  # (key, value, step, timestamp_ms)
                points.append((record[1] + suffix, float(record[2]), int(record[3]), int(record[4])))
            elif kind == "p":
                params.append(writer.param(record[1] + suffix, record[2]))
            elif kind == "t":
                tags.append(writer.tag(record[1] + suffix, record[2]))
            else:
                artifacts.append(record)
        run_id = _run_of(state, label)
        with self._quiet(store_uri(config)):
            metrics = self._log_points(store_uri(config), run_id, points)
            if metrics or params or tags:
                writer.runs.log_batch(run_id, metrics=metrics, params=params, tags=tags)
            for _, local_path, artifact_path in artifacts:
                if suffix:
                    artifact_path = f"rank_{label}" + (f"/{artifact_path}" if artifact_path else "")
                writer.runs.log_artifact(run_id, local_path, artifact_path)

    def joins_rounds(self, config: SinkConfig) -> bool:
        """`deliver_round` is worth it into a SQL store we open ourselves (one transaction) and
        into a server with the bulk route (one round in requests sent in parallel, see
        mlflow_bulk.py); into any other server the forwarder's threads send streams in parallel."""
        return self.writer(store_uri(config)).takes_batches()

    def deliver_round(self, config: SinkConfig, items: list[tuple[str, StreamState, list[list]]]) -> None:
        """One batch of several streams, (label, state, records) each: when they are all metric
        points, into a SQL store in one transaction (a commit is an fsync: this is what lets
        sqlite keep up) or into a server with the bulk route in one request (one transaction
        there too); else one stream after the other. All or an exception, safe to resend."""
        uri = store_uri(config)
        writer = self.writer(uri)
        metric_only = all(r[0] == "m" for _, _, records in items for r in records)
        if not metric_only or not writer.takes_batches():
            for label, state, records in items:
                self.deliver(config, label, state, records)
            return
        suffix = config.layout == "flat"
        groups = [(_run_of(state, label), [(r[1] + (f"-{label}" if suffix else ""), r[2], r[3], r[4])
                                           for r in records]) for label, state, records in items]
        with self._quiet(uri):
            writer.log_round(groups)

    def _log_points(self, uri: str, run_id: str, points: list[Point]) -> list[Any]:
        """Metric points through the fastest path the store has: the SQL fast path (a database
        we open ourselves), the server's bulk route (`platform-run server`), else nothing is
        sent here and MLflow `Metric`s come back for `log_batch`."""
        return self.writer(uri).log_points(run_id, points) if points else []

    def deliver_aggregates(self, config: SinkConfig, points: list[AggregatePoint]) -> None:
        """Per-step aggregates across ranks (aggregates.py) into the job's parent run: as many
        points as the ranks', so through the same fast paths."""
        if not config.parent_run_id:
            return
        with self._quiet(store_uri(config)):
            metrics = self._log_points(store_uri(config), config.parent_run_id,
                                       [(p.key, p.value, p.step, p.timestamp_ms) for p in points])
            step = self.limits["m"]  # aggregates come in batches of sql_limits: log_batch takes fewer
            for start in range(0, len(metrics), step):
                self.writer(store_uri(config)).runs.log_batch(config.parent_run_id,
                                                              metrics=metrics[start:start + step])

    def is_permanent(self, exc: BaseException) -> bool:
        return mlflow_refusals.permanent(exc)

    def refuses_run(self, exc: BaseException) -> bool:
        return mlflow_refusals.refused_run(exc)

    def refuses_access(self, uri: str, exc: BaseException) -> str | None:
        return mlflow_refusals.access_refusal(exc, uri)

    # --- end of job -------------------------------------------------------------------------
    def end_job(self, config: SinkConfig, spool_dir: Path, pending: dict[str, int] | None = None) -> bool:
        """Upload rank logs and end the runs with the job's status. A run whose stream still
        has `pending[label]` records is left RUNNING with a tag saying how many (and so is the
        job's run): `sync` ends them once it has delivered them. True when every run ended."""
        with self._quiet(store_uri(config), Path(spool_dir) / LOG_FILE):
            return mlflow_end.end_job(self.writer(store_uri(config)).runs, config, spool_dir, pending, self)

    # --- one job across servers (mlflow_job.py) ----------------------------------------------
    def report_gone(self, config: SinkConfig, spool_dir: Path, gone: list[str]) -> None:
        with self._quiet(store_uri(config), Path(spool_dir) / LOG_FILE):
            runs = self.writer(store_uri(config)).runs
            mlflow_job.report_gone(runs, config, gone, lambda: mlflow_aggregates.job_wide(runs, config, self))


def _run_of(state: StreamState, label: str) -> str:
    """The stream's run (ensure_runs made it before any delivery)."""
    if state.run_id is None:
        raise PlatformPluginError(f"rank {label} has no run yet (ensure_runs did not finish)")
    return state.run_id


def _answered(value: Any, what: str, uri: str) -> str:
    """An id the store gave back. MLflow's client turns any JSON reply into an (empty) answer:
    a server that is not MLflow (a proxy, another API answering 200 to everything) would
    otherwise get every point "delivered" into runs with an empty id and lose them all."""
    if not value or not isinstance(value, str):
        raise PlatformPluginError(f"{uri} answered without a {what}: it does not behave as an "
                                  "MLflow tracking server (check MLFLOW_TRACKING_URI); the "
                                  "points stay in the spool")
    return value
