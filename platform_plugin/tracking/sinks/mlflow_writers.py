"""One writer per MLflow store, chosen once from its tracking URI.

As MLflow's `TrackingStoreRegistry` picks a store by the URI's scheme, `open_writer` picks how
the sink writes into a store, by the scheme and what the store answers once:

| route | store | runs, params, tags | metric points |
|---|---|---|---|
| `sql` | sqlite, PostgreSQL (the SQL fast path: `mlflow_sql`) | MLflow's client | one INSERT per batch |
| `rest-bulk` | a server with the bulk route (`platform-run server`) | `mlflow_rest` (no MLflow import) | the bulk route |
| `client-bulk` | the same, under settings `mlflow_rest` does not implement (an auth plugin) | MLflow's client | the bulk route, through MLflow's HTTP helper |
| `rest-log-batch` | any other server (a plain `mlflow server`) | MLflow's client | `log_batch` |
| `mlflow-client` | every other scheme (a file store, another database) | MLflow's client | `log_batch` |

(the wflogger sink is the other sink, not an MLflow route: `sinks/__init__.SINKS`). Every
writer is a `StoreWriter`: its `runs` take MLflow's client's calls (`RunStore`); its points go
its own way, and what it cannot take comes back as MLflow `Metric`s for `runs.log_batch`.
"""
from __future__ import annotations

import dataclasses
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence
from urllib.parse import urlparse

from platform_plugin.tracking.sinks import mlflow_rest
from platform_plugin.tracking.sinks.mlflow_bulk import BulkRoute, MlflowRequests, RestRequests
from platform_plugin.tracking.sinks.mlflow_conventions import quiet
from platform_plugin.tracking.sinks.mlflow_internals import client_store
from platform_plugin.tracking.sinks.mlflow_sql import SqlMetricWriter

Point = tuple[str, float, int, int]  # (key, value, step, timestamp_ms)
RunPoints = tuple[str, list[Point]]  # (run_id, its points)


class RunStore(Protocol):
    """A store's runs, by MLflow's client's names and arguments: MLflow's `MlflowClient`, or
    `mlflow_rest.RestClient` (the same calls as plain REST requests)."""

    def get_experiment_by_name(self, name: str) -> Any: ...
    def create_experiment(self, name: str, artifact_location: str | None = None) -> str: ...
    def set_experiment_tag(self, experiment_id: str, key: str, value: Any) -> None: ...
    def create_run(self, experiment_id: str, start_time: int | None = None,
                   tags: dict[str, Any] | None = None, run_name: str | None = None) -> Any: ...
    def log_batch(self, run_id: str, metrics: Sequence[Any] = (), params: Sequence[Any] = (),
                  tags: Sequence[Any] = (), synchronous: bool | None = None) -> Any: ...
    def set_tag(self, run_id: str, key: str, value: Any) -> Any: ...
    def delete_tag(self, run_id: str, key: str) -> None: ...
    def get_run(self, run_id: str) -> Any: ...
    def set_terminated(self, run_id: str, status: str | None = None, end_time: int | None = None) -> None: ...
    def update_run(self, run_id: str, status: str) -> Any: ...
    def delete_run(self, run_id: str) -> None: ...
    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None = None) -> None: ...
    def get_metric_history(self, run_id: str, key: str) -> list[Any]: ...
    def search_runs(self, experiment_ids: list[str], filter_string: str = "", max_results: int = 1000,
                    **more: Any) -> Any: ...


class StoreWriter(Protocol):
    """How the sink writes into one store (one per tracking URI: `open_writer`)."""
    route: str
    runs: RunStore

    def errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions carrying MLflow's error codes that `runs` raises."""

    def quiet(self, log_path: Path | None) -> AbstractContextManager[Any]:
        """Around the writer's calls: MLflow's console lines to the job's mlflow.log."""

    def param(self, key: str, value: str) -> Any: ...

    def tag(self, key: str, value: str) -> Any: ...

    def takes_batches(self) -> bool:
        """Metric points by the 10,000 and a round of streams in one call (`log_round`)."""

    def log_points(self, run_id: str, points: list[Point]) -> list[Any]:
        """Store `points`, or give them back as MLflow `Metric`s for `runs.log_batch`."""

    def log_round(self, groups: list[RunPoints]) -> None:
        """Several runs' points at once (only when `takes_batches()`); all or an exception."""


def as_metrics(points: list[Point]) -> list[Any]:
    from mlflow.entities import Metric
    return [Metric(key, value, timestamp, step) for key, value, step, timestamp in points]


class ClientWriter:
    """MLflow's client for everything; points through `log_batch`."""

    def __init__(self, client: Any, route: str = "mlflow-client"):
        self.runs: RunStore = client
        self.route = route

    def errors(self) -> tuple[type[BaseException], ...]:
        loaded = sys.modules.get("mlflow.exceptions")  # imported with MLflow's client
        return () if loaded is None else (loaded.MlflowException,)

    def quiet(self, log_path: Path | None) -> AbstractContextManager[Any]:
        return quiet(log_path)

    def param(self, key: str, value: str) -> Any:
        from mlflow.entities import Param
        return Param(key, value)

    def tag(self, key: str, value: str) -> Any:
        from mlflow.entities import RunTag
        return RunTag(key, value)

    def takes_batches(self) -> bool:
        return False

    def log_points(self, run_id: str, points: list[Point]) -> list[Any]:
        return as_metrics(points)

    def log_round(self, groups: list[RunPoints]) -> None:
        raise NotImplementedError(f"the {self.route} route takes no rounds")


class SqlWriter(ClientWriter):
    """A SQL store we open ourselves: runs through MLflow's client, points by one INSERT a batch."""

    def __init__(self, client: Any, sql: SqlMetricWriter):
        super().__init__(client, "sql")
        self.sql = sql

    def takes_batches(self) -> bool:
        return True

    def log_points(self, run_id: str, points: list[Point]) -> list[Any]:
        self.sql.log_metrics(run_id, points)
        return []

    def log_round(self, groups: list[RunPoints]) -> None:
        self.sql.log_metrics_many(groups)


class ClientBulkWriter(ClientWriter):
    """A server with the bulk route, reached through MLflow's client (settings only it knows).
    The route asked again after it vanished (a server replaced): then `log_batch`."""

    def __init__(self, client: Any, bulk: BulkRoute, uri: str):
        super().__init__(client, "client-bulk")
        self.bulk, self.uri, self.requests = bulk, uri, MlflowRequests(client)

    def takes_batches(self) -> bool:
        return self.bulk.available(self.requests, self.uri)

    def log_points(self, run_id: str, points: list[Point]) -> list[Any]:
        if not self.takes_batches():
            return as_metrics(points)
        self.bulk.post(self.requests, self.uri, run_id, points)
        return []

    def log_round(self, groups: list[RunPoints]) -> None:
        self.bulk.post_many(self.requests, self.uri, groups)


class RestBulkWriter:
    """A server with the bulk route: runs by plain REST requests (no MLflow import in front of
    the first points), points by the bulk route (`log_batch` through MLflow's client if it
    vanished)."""
    route = "rest-bulk"

    def __init__(self, rest: mlflow_rest.RestClient, bulk: BulkRoute):
        self.rest = rest
        self.runs: RunStore = rest
        self.bulk, self.requests = bulk, RestRequests(rest.transport)

    def errors(self) -> tuple[type[BaseException], ...]:
        return (mlflow_rest.RestError,)

    def quiet(self, log_path: Path | None) -> AbstractContextManager[Any]:
        return nullcontext()  # no MLflow in this process to quiet

    def param(self, key: str, value: str) -> Any:
        return mlflow_rest.KeyValue(key, value)

    def tag(self, key: str, value: str) -> Any:
        return mlflow_rest.KeyValue(key, value)

    def takes_batches(self) -> bool:
        return self.bulk.available(self.requests, self.rest.uri)

    def log_points(self, run_id: str, points: list[Point]) -> list[Any]:
        if not self.takes_batches():
            return as_metrics(points)
        self.bulk.post(self.requests, self.rest.uri, run_id, points)
        return []

    def log_round(self, groups: list[RunPoints]) -> None:
        self.bulk.post_many(self.requests, self.rest.uri, groups)


@dataclasses.dataclass
class Opening:
    """What a writer is made of, the sink's own: MLflow's client of a store (opened once, under
    the store's lock), the REST transport of a server, the bulk route's answers."""
    client: Callable[[str], Any]
    transport: Callable[[str], mlflow_rest.Transport]
    bulk: BulkRoute


def http_writer(uri: str, opening: Opening) -> StoreWriter:
    """A server: asks once whether it has the bulk route."""
    if mlflow_rest.usable(uri):
        rest = mlflow_rest.RestClient(uri, transport=opening.transport(uri))
        if opening.bulk.available(RestRequests(rest.transport), uri):
            return RestBulkWriter(rest, opening.bulk)
        return ClientWriter(opening.client(uri), "rest-log-batch")
    return client_writer(opening.client(uri), uri, opening.bulk)


def client_writer(client: Any, uri: str, bulk: BulkRoute) -> StoreWriter:
    """MLflow's client into a server: with the bulk route when the server has it."""
    if bulk.available(MlflowRequests(client), uri):
        return ClientBulkWriter(client, bulk, uri)
    return ClientWriter(client, "rest-log-batch")


def sql_writer(uri: str, opening: Opening) -> StoreWriter:
    """A database: the SQL fast path when MLflow's store is one it knows."""
    client = opening.client(uri)
    store = client_store(client)
    sql = SqlMetricWriter.for_store(store) if store is not None else None
    return ClientWriter(client) if sql is None else SqlWriter(client, sql)


def other_writer(uri: str, opening: Opening) -> StoreWriter:
    return ClientWriter(opening.client(uri))


# the URI's scheme (its dialect before a "+driver") -> the writer's maker; any other: MLflow's client
WRITERS: dict[str, Callable[[str, Opening], StoreWriter]] = {
    "http": http_writer, "https": http_writer, "sqlite": sql_writer, "postgresql": sql_writer}


def open_writer(uri: str, opening: Opening) -> StoreWriter:
    """The store's writer (a server down while it is asked raises: nothing is decided then)."""
    scheme = urlparse(uri).scheme.split("+")[0]
    return WRITERS.get(scheme, other_writer)(uri, opening)
