"""TensorFlow (1.15, and `tf.compat.v1` / `tf.keras` of 2.x): a `SessionRunHook` that logs a loss
tensor and steps/s, and a `tf.keras` callback, both through the rank's tracker.

    from platform_plugin.tracking.integrations.tensorflow import MetricsHook, MetricsCallback
    with tf.train.MonitoredTrainingSession(hooks=[MetricsHook(loss)]) as sess:
        while not sess.should_stop():
            sess.run(train_op)

    model.fit(x, y, epochs=3, callbacks=[MetricsCallback()])

Rank-aware through the tracker: each rank's points go to its own run (or `loss-3` keys in the
flat layout). The hook fetches the loss with the training step's own `run` (no extra run); with
`every=N` it fetches it every N-th run only. Steps are the runs (batches) this process did,
1, 2, ...: the same numbering on every rank, whatever the graph's global step.

Python 3.7 code: the TensorFlow 1.15 images run Python 3.7 (docs/compat.md).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import tensorflow as tf

from platform_plugin.tracking.rank.tracker import get_tracker


def _scalar(value: Any) -> float | None:
    """A fetched or Keras-reported value as one float (the mean of an array), else None."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return float(array.mean()) if array.size else None


class MetricsHook(tf.compat.v1.train.SessionRunHook):
    """Logs `loss` (a scalar tensor) as `loss`, and `steps_per_s` (and `samples_per_s` when
    `batch_size` is given, per rank) every `every` runs; `tensors` ({name: scalar tensor}) are
    fetched and logged with it. `params` are logged once, when the session is created."""

    def __init__(self, loss: Any, tracker: Any | None = None, *, every: int = 1, batch_size: int | None = None,
                 tensors: dict | None = None, params: dict | None = None, prefix: str = "") -> None:
        self.tracker = tracker or get_tracker()
        self.every = max(1, int(every))
        self.batch_size = batch_size
        self.prefix = prefix
        self.params = dict(params or {})
        self._fetches = dict(tensors or {})
        self._fetches["loss"] = loss
        self.step = 0
        self._since = 0.0

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self.params:
            self.tracker.log_params({self.prefix + k: v for k, v in self.params.items()})
        self._since = time.perf_counter()

    def before_run(self, run_context: Any) -> Any:
        self.step += 1
        if self.step % self.every:
            return None
        return tf.compat.v1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self.step % self.every or not run_values.results:
            return
        now = time.perf_counter()
        seconds, self._since = now - self._since, now
        metrics = {}
        for name, value in run_values.results.items():
            number = _scalar(value)
            if number is not None:
                metrics[name] = number
        if seconds > 0:
            metrics["steps_per_s"] = self.every / seconds
            if self.batch_size:
                metrics["samples_per_s"] = self.every * self.batch_size / seconds
        self.tracker.log_metrics({self.prefix + k: v for k, v in metrics.items()}, step=self.step)

    def end(self, session: Any) -> None:
        self.tracker.flush()


class MetricsCallback(tf.keras.callbacks.Callback):
    """`model.fit(..., callbacks=[MetricsCallback()])`: the batch loss as `loss` every
    `log_every_n_steps` batches (steps count the batches of the whole fit, from 1), and per
    epoch (step = the epoch, from 0) everything Keras reports (`epoch_loss`, `epoch_acc`,
    `epoch_val_loss`, ...), `epoch_time_s` and `steps_per_s`; fit's epochs, steps and batch size
    as params."""

    def __init__(self, tracker: Any | None = None, *, log_every_n_steps: int = 1, prefix: str = "") -> None:
        super().__init__()
        self.tracker = tracker or get_tracker()
        self.every = max(1, int(log_every_n_steps))
        self.prefix = prefix
        self.step = 0
        self._epoch_start = 0.0
        self._epoch_steps = 0

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        params = self.params or {}
        wanted = {"epochs": params.get("epochs"), "steps_per_epoch": params.get("steps"),
                  "batch_size": params.get("batch_size"),
                  "optimizer": type(getattr(self.model, "optimizer", None)).__name__}
        self.tracker.log_params({self.prefix + k: v for k, v in wanted.items() if v is not None})

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch_start = time.perf_counter()
        self._epoch_steps = 0

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1
        self._epoch_steps += 1
        if self.step % self.every:
            return
        loss = _scalar((logs or {}).get("loss"))
        if loss is not None:
            self.tracker.log_metric(self.prefix + "loss", loss, step=self.step)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        seconds = time.perf_counter() - self._epoch_start
        metrics = {"epoch_time_s": seconds}
        if seconds > 0 and self._epoch_steps:
            metrics["steps_per_s"] = self._epoch_steps / seconds
        for name, value in (logs or {}).items():
            number = _scalar(value)
            if number is not None:
                metrics["epoch_" + name] = number
        self.tracker.log_metrics({self.prefix + k: v for k, v in metrics.items()}, step=int(epoch))

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.tracker.flush()
