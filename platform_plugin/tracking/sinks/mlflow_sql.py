"""Metric points straight into an MLflow SQL store (sqlite, PostgreSQL), many per statement.

MLflow's `log_batch` builds one ORM object per point: it is CPU-bound in one interpreter and
threads do not help (measured: docs/benchmarks.md, tracking).
The spool already holds validated, deduplicated points with their timestamps, so the forwarder
writes them with one multi-row INSERT per batch into MLflow's own tables - the table objects
come from the installed MLflow (`SqlMetric.__table__`), so the columns always match its schema -
with the same semantics as `SqlAlchemyStore._log_metrics`:

- an exact repeat of a point (same key, value, step, timestamp) is ignored (the primary key;
  ON CONFLICT DO NOTHING), so a replayed batch adds no duplicate;
- NaN is stored as 0 with `is_nan`, +/-inf as +/-max float;
- `latest_metrics` keeps the point with the greatest (step, timestamp, value) per key;
- only an active run takes points; metric names pass MLflow's own name validation.

Any other store (a file store, an http server) goes through `log_batch`.
"""
from __future__ import annotations

import math
import threading
from contextlib import nullcontext
from operator import itemgetter
from typing import Any

from platform_plugin.tracking.sinks.mlflow_internals import validate_metric_name

FAST_DIALECTS = ("sqlite", "postgresql")
METRIC_COLUMNS = ("key", "value", "timestamp", "step", "is_nan", "run_uuid")
PG_ARRAY_TYPES = ("text", "float8", "bigint", "bigint", "boolean", "text")  # of METRIC_COLUMNS
MAX_FLOAT = 1.7976931348623157e308
CACHE_KIB = 64 * 1024  # sqlite's page cache per connection (its default is 2 MiB)


class SqlMetricWriter:
    def __init__(self, store: Any) -> None:
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlRun
        self.engine = store.engine
        self.dialect = self.engine.dialect.name
        self.metrics = SqlMetric.__table__
        self.latest = SqlLatestMetric.__table__
        self.runs = SqlRun.__table__
        self._valid_keys: set[str] = set()
        missing = set(METRIC_COLUMNS) - set(self.metrics.c.keys())
        if missing:  # an MLflow whose schema this module does not know: use log_batch
            raise ValueError(f"unknown metrics table (no {sorted(missing)})")
        self._insert_sql = self._metric_insert_sql()
        names = ", ".join(f'"{c}"' for c in METRIC_COLUMNS)
        arrays = ", ".join(f"%s::{t}[]" for t in PG_ARRAY_TYPES)
        self._unnest_sql = (f"INSERT INTO {self.metrics.name} ({names}) SELECT * FROM unnest({arrays}) "
                            "ON CONFLICT DO NOTHING")
        # sqlite has one writer at a time: threads of this process take turns here instead of
        # timing out on the file lock (other processes still wait on sqlite's busy timeout)
        self._one_writer = threading.Lock() if self.dialect == "sqlite" else None

    @classmethod
    def for_store(cls, store: Any) -> "SqlMetricWriter | None":
        engine = getattr(store, "engine", None)
        if engine is None or engine.dialect.name not in FAST_DIALECTS:
            return None
        try:
            return cls(store)
        except (ImportError, ValueError):
            return None

    def _insert_ignoring_repeats(self, table: Any) -> Any:
        if self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert
            return sqlite_insert(table).on_conflict_do_nothing()
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert
        return postgresql_insert(table).on_conflict_do_nothing()

    def _metric_insert_sql(self) -> str:
        """The driver-level INSERT (no per-row parameter processing by SQLAlchemy: a third of
        the time at 1,000 rows a batch), built from MLflow's own table object."""
        mark = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"
        names = ", ".join(f'"{c}"' for c in METRIC_COLUMNS)
        return (f"INSERT INTO {self.metrics.name} ({names}) VALUES "
                f"({', '.join([mark] * len(METRIC_COLUMNS))}) ON CONFLICT DO NOTHING")

    def log_metrics(self, run_id: str, points: Any) -> None:
        """points: (key, value, step, timestamp_ms) tuples. All or nothing (one transaction)."""
        self.log_metrics_many([(run_id, points)])

    def log_metrics_many(self, groups: Any) -> None:
        """(run_id, points) groups, all in one transaction (all or nothing)."""
        self._validate_keys({p[0] for _, points in groups for p in points})
        rows = [(run_id, _rows(run_id, points)) for run_id, points in groups]
        with self._one_writer or nullcontext(), self.engine.begin() as conn:
            if self.dialect == "sqlite":  # a larger page cache for this connection: inserts
                conn.exec_driver_sql(f"PRAGMA cache_size = -{CACHE_KIB}")  # into 3 growing b-trees
            for run_id, values in rows:
                self._check_active(conn, run_id)
            self._insert_points(conn, [row for _, values in rows for row in values])
            for run_id, values in rows:
                self._update_latest(conn, run_id, values)

    def _insert_points(self, conn: Any, values: list[tuple]) -> None:
        """PostgreSQL: one statement taking one array per column (`unnest`): psycopg2 adapts
        a list in C, while its `executemany` (what SQLAlchemy uses for driver-level SQL) is a
        round trip per row and `execute_values` formats every row in Python (unnest measured
        1.2-2x faster than execute_values for 10,000 rows on a loaded machine); sqlite:
        `executemany` (in-process, no round trips)."""
        if not values:
            return
        if self.dialect == "postgresql":
            columns = [list(column) for column in zip(*values)]
            conn.connection.driver_connection.cursor().execute(self._unnest_sql, columns)
            return
        conn.exec_driver_sql(self._insert_sql, values)

    def _validate_keys(self, keys: set[str]) -> None:
        for key in keys - self._valid_keys:
            if not isinstance(key, str):  # the bulk route's body: refused as a bad body
                raise TypeError(f"metric name {key!r} is not a string")
            validate_metric_name(key)  # raises MlflowException(INVALID_PARAMETER_VALUE)
            self._valid_keys.add(key)

    def _check_active(self, conn: Any, run_id: str) -> None:
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
        from sqlalchemy import select
        stage = conn.execute(select(self.runs.c.lifecycle_stage)
                             .where(self.runs.c.run_uuid == run_id)).scalar()
        if stage is None:  # MLflow's own wording and code for an unknown run
            from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST
            raise MlflowException(f"Run with id={run_id} not found", error_code=RESOURCE_DOES_NOT_EXIST)
        if stage != "active":
            raise MlflowException(f"The run {run_id} must be in the 'active' state. Current state "
                                  f"is {stage}.", error_code=INVALID_PARAMETER_VALUE)

    def _update_latest(self, conn: Any, run_id: str, values: Any) -> None:
        from sqlalchemy import select, update
        newest: dict[str, tuple] = {}  # key -> (key, value, timestamp, step, is_nan, run_id)
        for row in sorted(values, key=LATEST_ORDER):  # a C sort; the last row per key wins
            newest[row[0]] = row
        t = self.latest
        existing = {r.key: (r.step, r.timestamp, r.value) for r in conn.execute(
            select(t.c.key, t.c.step, t.c.timestamp, t.c.value)
            .where(t.c.run_uuid == run_id, t.c.key.in_(sorted(newest))))}
        for key, (_, value, timestamp, step, is_nan, _) in sorted(newest.items()):  # one lock order
            fresh = {"value": value, "timestamp": timestamp, "step": step, "is_nan": is_nan}
            old = existing.get(key)
            if old is None:
                conn.execute(self._insert_ignoring_repeats(t), [{"run_uuid": run_id, "key": key, **fresh}])
            elif (step, timestamp, value) > old:
                conn.execute(update(t).where(t.c.run_uuid == run_id, t.c.key == key).values(**fresh))


def _rows(run_id: str, points: Any) -> list[tuple]:
    """Rows in the table's column order, each once (an exact repeat in a batch is one row)."""
    return list(dict.fromkeys(
        (key, float(value), int(timestamp), int(step), False, run_id)
        if value - value == 0.0 else _sanitized_row(key, float(value), int(timestamp), int(step), run_id)
        for key, value, step, timestamp in points))


# (step, timestamp, value) of a row: how MLflow picks a key's latest point
LATEST_ORDER = itemgetter(3, 2, 1)


def _sanitized_row(key: str, value: float, timestamp: int, step: int, run_id: str) -> tuple:
    """NaN is stored as 0 with is_nan, +/-inf as +/-max float (as MLflow does)."""
    if math.isnan(value):
        return (key, 0.0, timestamp, step, True, run_id)
    return (key, MAX_FLOAT if value > 0 else -MAX_FLOAT, timestamp, step, False, run_id)
