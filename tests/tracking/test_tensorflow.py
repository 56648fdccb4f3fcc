"""The TensorFlow integration in a real `tf.keras` fit: TensorFlow 1.15 on a Python 3.7 rank,
launched from this environment, tracked into MLflow. (The SessionRunHook runs in the example's
test: tests/examples/test_tf1.py.)"""
from __future__ import annotations

import shutil

import pytest

from platform_plugin.launcher import launch
from tests.helpers import python37
from tests.tracking.helpers import ASSETS, child_runs, client

pytestmark = [pytest.mark.slow, pytest.mark.py37]


def test_keras_callback_logs_batches_and_epochs(tracking_env, tmp_path):
    python = python37()
    shutil.copy(ASSETS / "tf_keras_train.py", tmp_path / "tf_keras_train.py")
    tracking_env.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = launch([python, "tf_keras_train.py"], nproc=1, backend="plain", tracking="mlflow",
                    cwd=str(tmp_path), no_system_metrics=True, write=lambda text: None)
    report = result.tracking
    assert result.ok and report.pending == 0
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = child_runs(c, report.parent_run_id)
    assert run.data.params == {"epochs": "2", "batch_size": "16", "optimizer": "SGD"}
    # 64 samples in batches of 16, 2 epochs: a loss per batch, every point once
    assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(1, 9))
    for name in ("epoch_loss", "epoch_acc", "epoch_val_loss", "epoch_val_acc", "epoch_time_s",
                 "steps_per_s"):
        assert [m.step for m in c.get_metric_history(run.info.run_id, name)] == [0, 1], name
    assert run.data.metrics["steps_per_s"] > 0
