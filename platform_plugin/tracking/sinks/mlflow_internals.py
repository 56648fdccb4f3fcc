"""The private names of MLflow's client side the sinks rely on, in this one module (the
server side's are in tracking/server/bulk_app.py). docs/compat.md lists each with the MLflow
versions it was checked on; tests/tracking/test_mlflow_contract.py fails when one moves."""
from __future__ import annotations

from typing import Any


def client_store(client: Any) -> Any:
    """The store behind MLflow's client (`MlflowClient._tracking_client.store`: a
    SqlAlchemyStore, a RestStore, ...), or None when this MLflow keeps it elsewhere: the SQL
    fast path needs its SQLAlchemy engine, the bulk route its host credentials."""
    return getattr(getattr(client, "_tracking_client", None), "store", None)


def host_credentials(client: Any) -> Any:
    """The `MlflowHostCreds` MLflow's client sends its requests with (auth plugins included)."""
    return client_store(client).get_host_creds()


def validate_metric_name(name: str, path: str = "name") -> None:
    """MLflow's own check of a metric name: raises MlflowException(INVALID_PARAMETER_VALUE)."""
    from mlflow.utils.validation import _validate_metric_name
    _validate_metric_name(name, path)
