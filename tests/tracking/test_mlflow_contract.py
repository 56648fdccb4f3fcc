"""MLflow's private names the package relies on, checked against the installed MLflow: each is
still where the adapters reach it and still does what they use it for. Client side:
tracking/sinks/mlflow_internals.py; server side: tracking/server/bulk_app.py; the list, with
the versions it was checked on, is docs/compat.md's. Not slow: `make test` runs it against the
pinned MLflow, `make test-compat` against the oldest supported one."""
from __future__ import annotations

import inspect

import pytest

from platform_plugin.tracking.sinks import mlflow_internals
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
from platform_plugin.tracking.sinks.mlflow_sql import METRIC_COLUMNS, SqlMetricWriter

mlflow = pytest.importorskip("mlflow")
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

# MLflow versions older than the first one a server-side name was seen in: the team server's
# bulk app needs the newer MLflow there (docs/compat.md)
SERVER_ONLY_FROM = (3, 17)


def version() -> tuple[int, int]:
    major, minor = mlflow.__version__.split(".")[:2]
    return int(major), int(minor)


def test_the_client_store_of_a_sqlite_store_gives_the_sql_fast_path_its_engine(tmp_path):
    client = MlflowSink().client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    store = mlflow_internals.client_store(client)  # MlflowClient._tracking_client.store
    assert store is not None and store.engine.dialect.name == "sqlite"
    writer = SqlMetricWriter.for_store(store)  # dbmodels' SqlMetric, SqlLatestMetric, SqlRun
    assert writer is not None and set(METRIC_COLUMNS) <= set(writer.metrics.c.keys())


def test_the_client_store_of_a_server_gives_the_bulk_route_its_credentials(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "secret")
    creds = mlflow_internals.host_credentials(MlflowClient(tracking_uri="http://127.0.0.1:9"))
    assert (creds.host, creds.username, creds.password) == ("http://127.0.0.1:9", "alice", "secret")


@pytest.mark.parametrize("name", ["a/../b", "bad!name", "/lead"])
def test_mlflows_metric_name_check_refuses_what_mlflow_refuses(name):
    with pytest.raises(MlflowException) as refused:
        mlflow_internals.validate_metric_name(name, "metrics[0].key")
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE"
    mlflow_internals.validate_metric_name("train/loss", "metrics[0].key")  # taken


def test_the_server_sides_validation_names_are_where_bulk_app_reaches_them():
    from mlflow.utils import validation
    assert list(inspect.signature(validation._validate_run_id).parameters)[:2] == ["run_id", "path"]
    assert list(inspect.signature(validation._validate_metric_name).parameters)[:2] == ["name", "path"]
    with pytest.raises(MlflowException):
        validation._validate_run_id("not a run id", "runs[0].run_id")
    from mlflow.server import handlers
    assert callable(handlers._get_tracking_store)


def test_the_server_sides_auth_and_serving_names_are_where_bulk_app_reaches_them():
    if version() < SERVER_ONLY_FROM:
        pytest.skip(f"MLflow {mlflow.__version__} has neither name: docs/compat.md")
    from mlflow.environment_variables import _MLFLOW_SGI_NAME
    assert _MLFLOW_SGI_NAME.name == "_MLFLOW_SGI_NAME"
    from mlflow.server import auth
    assert list(inspect.signature(auth._authorize_run_id).parameters) == ["run_id", "action"]
    assert isinstance(auth.BEFORE_REQUEST_VALIDATORS, dict)
