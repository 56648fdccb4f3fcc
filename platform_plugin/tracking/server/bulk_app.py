"""The team server's app: MLflow's own tracking server plus one bulk route for metric points.

`platform-run server` runs `mlflow server --app-name platform-bulk`; MLflow finds this factory
through the `mlflow.app` entry point (as it finds its own `basic-auth` app) and serves it with
uvicorn like its default app. Everything MLflow serves stays as it is; one route is added:

    GET  /platform/api/metrics/bulk  -> {"version": 1, "max_points": N}   (discovery)
    POST /platform/api/metrics/bulk  <- {"runs": [{"run_id": ID, "metrics": [[key, value,
                                         step, timestamp_ms], ...]}, ...]}
                                     -> {"stored": n}

Why: MLflow's `log_batch` handler spends protobuf parsing and ORM work on every point in the
server (profiled: docs/benchmarks.md, multiserver), so a 2-core server stores a few thousand
points a second whatever the client does. The route writes the same rows `log_batch` writes
(metrics + latest_metrics) through the forwarder's SQL fast path
(`sinks/mlflow_sql.SqlMetricWriter`: one INSERT for every run of the request, in one
transaction), with the same rules: an exact repeat of a point adds nothing (so a replayed batch is harmless), NaN
and infinities stored as MLflow stores them, every point checked against MLflow's limits before
the database is touched (`check_points`: names, numbers, int64 steps and timestamps), an
unknown run refused with RESOURCE_DOES_NOT_EXIST and a deleted one with
INVALID_PARAMETER_VALUE (MLflow's codes; errors are MLflow's JSON error bodies, HTTP 400). A store the
fast path does not know (a file store) gets the points through the store's own `log_batch`.
Security middleware, host checks and any auth MLflow applies to its Flask app apply here too.

`platform-run server` runs it behind MLflow's basic-auth app (`--app-name platform-bulk-auth`,
`create_auth_app`): the auth app's before-request hook answers 401 to a request without valid
credentials on every Flask route, this one included. Its authorization step knows only
MLflow's own routes (and by default denies any other to a non-admin), so the route is
registered there as open to every signed-in user, and the handler checks, once the body is
valid, the permission `log_batch` needs on each run's experiment (`check_can_update`).
"""
from __future__ import annotations

import json
import sys
import threading
from typing import Any

from platform_plugin.tracking.sinks.mlflow_bulk import MAX_POINTS, ROUTE, VERSION
from platform_plugin.tracking.sinks.mlflow_sql import SqlMetricWriter

_writers: dict[int, object] = {}
_writers_lock = threading.Lock()
_auth = {"enabled": False}  # set by create_auth_app in the server's workers


def create_app() -> Any:
    """The `mlflow.app` entry point (a factory: MLflow passes `--factory` to uvicorn)."""
    from mlflow.server import app as flask_app
    add_bulk_route(flask_app)
    from mlflow.environment_variables import _MLFLOW_SGI_NAME
    if _MLFLOW_SGI_NAME.get() == "uvicorn":
        from mlflow.server.fastapi_app import create_fastapi_app
        return create_fastapi_app(flask_app)
    return flask_app


def create_auth_app() -> Any:
    """The `platform-bulk-auth` entry point: the same app behind MLflow's basic-auth app."""
    from mlflow.server import app as flask_app
    from mlflow.server import auth
    add_bulk_route(flask_app)
    auth.BEFORE_REQUEST_VALIDATORS.update({(ROUTE, "GET"): _signed_in, (ROUTE, "POST"): _signed_in})
    _auth["enabled"] = True
    return auth.create_app(flask_app)  # wraps it in the FastAPI app under uvicorn, as create_app


def _signed_in() -> bool:
    """The auth app's gate for the route: it runs after the credentials were checked."""
    return True


def check_can_update(run_ids: Any) -> None:
    """PERMISSION_DENIED (403) unless the signed-in user may update every run, by the rule
    MLflow's auth app applies to `log_batch` (the run's experiment; an unknown run is denied
    too, as there). Admins may write anywhere; without the auth app there is nothing to check."""
    if not _auth["enabled"]:
        return
    from mlflow.server import auth
    if auth.sender_is_admin():
        return
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import PERMISSION_DENIED
    for run_id in dict.fromkeys(run_ids):
        # validate_can_log_batch's own check, for a run id that is not a request parameter
        if not auth._authorize_run_id(run_id, "update"):
            raise MlflowException(f"Permission denied: you may not log metrics to run {run_id}",
                                  error_code=PERMISSION_DENIED)


def add_bulk_route(flask_app: Any) -> None:
    if ROUTE in {rule.rule for rule in flask_app.url_map.iter_rules()}:
        return
    from mlflow.server.handlers import catch_mlflow_exception
    flask_app.add_url_rule(ROUTE, "platform_bulk_metrics", catch_mlflow_exception(_handle),
                           methods=["GET", "POST"])


def _handle() -> Any:
    from flask import request
    if request.method == "GET":
        return {"version": VERSION, "max_points": MAX_POINTS}
    runs = [(run_id, points) for run_id, points in parse_body(request.get_data()) if points]
    check_points(runs)  # MLflow's rules, before the database sees a value it would refuse
    check_can_update(run_id for run_id, _ in runs)
    store_points(_store(), runs)
    return {"stored": sum(len(points) for _, points in runs)}


BODY = "{'runs': [{'run_id': ID, 'metrics': [[key, value, step, timestamp_ms], ...]}]}"


def parse_body(data: bytes) -> list[tuple[str, list]]:
    """[(run_id, [[key, value, step, timestamp_ms], ...]), ...] or INVALID_PARAMETER_VALUE.
    The points themselves are checked where they are converted, once (`store_points`), not
    here as well: converting them is a large part of a request's time in the server."""
    try:
        body = json.loads(data)
        runs = [(_run_id(run["run_id"]), run["metrics"]) for run in body["runs"]]
        if not all(isinstance(points, list) for _, points in runs):
            raise TypeError("'metrics' is not a list")
    except RecursionError:  # nested deeper than the parser's stack: no body of this route is
        raise _invalid(f"bulk metrics body: nested too deeply; expected {BODY}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _invalid(f"bulk metrics body: expected {BODY} ({type(exc).__name__}: "
                       f"{str(exc)[:200]})") from None
    total = sum(len(points) for _, points in runs)
    if total > MAX_POINTS:
        raise _invalid(f"bulk metrics body holds {total} points; at most {MAX_POINTS} per request")
    return runs


def _run_id(value: object) -> str:
    """A run id is a string; anything else (a list nested 900 deep, a 4,000-digit number) is
    refused here, before str() of it could recurse or echo it whole."""
    if type(value) is not str:
        raise TypeError(f"a run_id is a string, not {type(value).__name__}")
    return value


MIN_LONG, MAX_LONG = -(1 << 63), (1 << 63) - 1  # a step and a timestamp are MLflow's int64
MAX_DOUBLE = sys.float_info.max  # an integer value beyond it has no double: float() overflows


def check_points(runs: list[tuple[str, list]]) -> None:
    """MLflow's rules for `log_batch`'s metrics, with its limits and its error code
    (INVALID_PARAMETER_VALUE: HTTP 400 with MLflow's JSON body): a run id MLflow could have
    made; a name of at most 250 characters that `_validate_metric_name` takes; a value that is a
    number (JSON's NaN and Infinity included: stored as MLflow stores them); a step in int64 and
    a timestamp in 0..int64 (integral floats as protobuf takes them). Without it the database
    refuses the value mid-transaction and the client gets a 500 and the server log a traceback."""
    from mlflow.utils.validation import _validate_run_id
    names: set[str] = set()
    for r, (run_id, points) in enumerate(runs):
        _validate_run_id(run_id, f"runs[{r}].run_id")
        for i, point in enumerate(points):
            if type(point) is not list or len(point) != 4:
                raise _invalid(f"runs[{r}].metrics[{i}]: expected [key, value, step, timestamp_ms]")
            key, value, step, timestamp = point
            if type(key) is not str or key not in names:
                _check_name(key, f"runs[{r}].metrics[{i}].key")
                names.add(key)
            if (type(value) is not float and type(value) is not int  # a bool is no number here
                    or type(value) is int and not -MAX_DOUBLE <= value <= MAX_DOUBLE):
                raise _invalid(_invalid_value(f"runs[{r}].metrics[{i}].value", value, "Please "
                               "specify value as a valid double (64-bit floating point)"))
            if type(step) is not int or not MIN_LONG <= step <= MAX_LONG:
                _check_long(step, f"runs[{r}].metrics[{i}].step", MIN_LONG,
                            "Step must be a valid long (64-bit integer).")
            if type(timestamp) is not int or not 0 <= timestamp <= MAX_LONG:
                _check_long(timestamp, f"runs[{r}].metrics[{i}].timestamp", 0,
                            "Timestamp must be a nonnegative long (64-bit integer)")


def _check_name(key: str, path: str) -> None:
    """MLflow's checks of a metric name; its length first, so a 100,000-character name is not
    echoed back whole."""
    from mlflow.utils.validation import (MAX_ENTITY_KEY_LENGTH, _validate_metric_name,
                                         exceeds_maximum_length)
    if type(key) is not str:
        raise _invalid(_invalid_value(path, key, "a metric name is a string"))
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        raise _invalid(exceeds_maximum_length(path, MAX_ENTITY_KEY_LENGTH))
    _validate_metric_name(key, path)


def _check_long(number: Any, path: str, lowest: int, rule: str) -> None:
    """An integer, or an integral float as protobuf's JSON parser takes it, within
    lowest..MAX_LONG; else INVALID_PARAMETER_VALUE."""
    integral = type(number) is int or (type(number) is float and number.is_integer())
    if not integral or not lowest <= int(number) <= MAX_LONG:
        raise _invalid(_invalid_value(path, number, rule))


def _invalid_value(path: str, value: Any, rule: str) -> str:
    from mlflow.utils.validation import invalid_value
    # the value came as JSON: it can be spelled again when it is short and flat; a long string
    # or number is shortened, a list or an object only named (it may nest hundreds deep)
    if isinstance(value, (list, dict)):
        shown = f"<a JSON {'array' if isinstance(value, list) else 'object'}>"
    elif type(value) is int and not -MAX_DOUBLE <= value <= MAX_DOUBLE:
        shown = f"<an integer of {len(str(abs(value)))} digits>"
    elif isinstance(value, str) and len(value) > 100:
        shown = value[:100] + "..."
    else:
        shown = value
    return invalid_value(path, shown, rule)


def store_points(store: Any, runs: list[tuple[str, list[tuple[str, float, int, int]]]]) -> None:
    """Every run's points in one transaction (the SQL fast path), else run by run through the
    store's own log_batch."""
    if not runs:
        return
    writer = _writer(store)
    try:
        if writer is not None:  # converts every point once (float, int) before its transaction
            writer.log_metrics_many(runs)
            return
        from mlflow.entities import Metric  # a store without the SQL fast path: its own log_batch
        batches = [(run_id, [Metric(str(k), float(v), int(t), int(s)) for k, v, s, t in points])
                   for run_id, points in runs]
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # a point not [str, number, int, int]
        raise _invalid(f"bulk metrics body: expected {BODY} ({type(exc).__name__}: {exc})") from exc
    for run_id, metrics in batches:
        store.log_batch(run_id, metrics=metrics, params=[], tags=[])


def _store() -> Any:
    from mlflow.server.handlers import _get_tracking_store
    return _get_tracking_store()


def _writer(store: Any) -> Any:
    with _writers_lock:
        if id(store) not in _writers:
            _writers[id(store)] = SqlMetricWriter.for_store(store)
        return _writers[id(store)]


def _invalid(message: str) -> Any:
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)
