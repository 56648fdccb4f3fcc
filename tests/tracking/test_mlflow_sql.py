"""The SQL fast path for metric points stores what MLflow's own log_batch stores: the same
history, the same latest values, NaN and infinities alike, exact repeats ignored, refusals
for a deleted run and an invalid name (real sqlite store)."""
from __future__ import annotations

import math

import pytest

from platform_plugin.tracking.sinks.mlflow_sql import SqlMetricWriter
from tests.tracking.helpers import client


def history(c, run_id: str, key: str) -> list[tuple]:
    return sorted((m.step, m.timestamp, "nan" if math.isnan(m.value) else m.value)
                  for m in c.get_metric_history(run_id, key))


def test_fast_path_matches_log_batch(tmp_path):
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = c.create_experiment("x")
    theirs, ours = (c.create_run(experiment).info.run_id for _ in range(2))
    points = [("loss", 0.5, 0, 1000), ("loss", float("nan"), 1, 1001), ("loss", float("inf"), 2, 1002),
              ("loss", -float("inf"), 3, 1003), ("loss", 0.25, 3, 1003), ("acc", 0.1, 7, 5), ("acc", 0.9, 2, 9)]
    c.log_batch(theirs, metrics=[Metric(k, v, t, s) for k, v, s, t in points])
    writer = SqlMetricWriter.for_store(c._tracking_client.store)
    assert writer is not None
    writer.log_metrics(ours, points[:4])
    writer.log_metrics(ours, points)  # a replayed batch: the repeats add nothing
    for key in ("loss", "acc"):
        assert history(c, ours, key) == history(c, theirs, key)
    assert c.get_run(ours).data.metrics == c.get_run(theirs).data.metrics  # latest per key

    with pytest.raises(MlflowException, match="must not resolve to other names"):
        writer.log_metrics(ours, [("bad/../name", 1.0, 0, 1)])
    c.delete_run(ours)
    with pytest.raises(MlflowException) as refused:
        writer.log_metrics(ours, [("loss", 1.0, 9, 9)])
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE"  # permanent: counted, passed
