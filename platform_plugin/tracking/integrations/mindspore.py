"""MindSpore: `MetricsCallback`, a `mindspore.train.Callback` that logs through the rank's
tracker - loss per step and per epoch, epoch time, samples/s and the learning rate.

    from platform_plugin.tracking.integrations.mindspore import MetricsCallback
    model.train(epochs, dataset, callbacks=[MetricsCallback()])

Rank-aware through the tracker: each rank's points go to its own run (or `loss-3` keys in the
flat layout); nothing here needs RANK_ID.
"""
from __future__ import annotations

import time

import numpy as np
from mindspore.train import Callback
from typing import Any

from platform_plugin.tracking.rank.tracker import get_tracker


def _scalar(value: Any) -> float | None:
    """Loss out of whatever the network returned: a Tensor, a tuple (loss, ...) or a number."""
    if isinstance(value, (tuple, list)):
        value = value[0] if value else None
    if value is None:
        return None
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    array = np.asarray(value, dtype=np.float64)
    return float(array.mean()) if array.size else None


def _global_step(cb: Any) -> int:
    """The step counted from the job's first epoch. `cur_step_num` restarts at 0 in a
    `Model.train(..., initial_epoch=N)` that resumes a restarted job, so the step is counted
    from the epoch: every epoch runs `batch_num` steps (one call per step, or per sink of
    `batch_num` steps), the same number as `cur_step_num` in a run that never stopped."""
    batch_num = int(cb.batch_num)
    within_epoch = (int(cb.cur_step_num) - 1) % batch_num + 1
    return (int(cb.cur_epoch_num) - 1) * batch_num + within_epoch


class MetricsCallback(Callback):
    def __init__(self, tracker: Any | None = None, *, log_every_n_steps: int = 1, prefix: str = "") -> None:
        super().__init__()
        self.tracker = tracker or get_tracker()
        self.every = max(1, int(log_every_n_steps))
        self.prefix = prefix
        self._epoch_start = 0.0
        self._epoch_losses: list[float] = []
        self._batch_size: int | None = None

    def _name(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def on_train_begin(self, run_context: Any) -> None:
        cb = run_context.original_args()
        dataset = getattr(cb, "train_dataset", None)
        try:
            self._batch_size = int(dataset.get_batch_size()) if dataset is not None else None
        except Exception:  # noqa: BLE001 - some datasets cannot tell
            self._batch_size = None
        params = {"epochs": getattr(cb, "epoch_num", None), "steps_per_epoch": getattr(cb, "batch_num", None),
                  "batch_size": self._batch_size,
                  "optimizer": type(getattr(cb, "optimizer", None)).__name__}
        self.tracker.log_params({self._name(k): v for k, v in params.items() if v is not None})

    def on_train_epoch_begin(self, run_context: Any) -> None:
        self._epoch_start = time.perf_counter()
        self._epoch_losses = []

    def on_train_step_end(self, run_context: Any) -> None:
        cb = run_context.original_args()
        loss = _scalar(cb.net_outputs)
        if loss is None:
            return
        self._epoch_losses.append(loss)
        step = _global_step(cb)
        if step % self.every == 0:
            self.tracker.log_metric(self._name("loss"), loss, step=step)

    def on_train_epoch_end(self, run_context: Any) -> None:
        cb = run_context.original_args()
        epoch, seconds = int(cb.cur_epoch_num), time.perf_counter() - self._epoch_start
        metrics = {"epoch_time_s": seconds}
        if self._epoch_losses:
            metrics["epoch_loss"] = float(np.mean(self._epoch_losses))
        steps = getattr(cb, "batch_num", None) or len(self._epoch_losses)
        if self._batch_size and steps and seconds > 0:
            metrics["samples_per_s"] = self._batch_size * steps / seconds
        lr = self._learning_rate(cb)
        if lr is not None:
            metrics["learning_rate"] = lr
        self.tracker.log_metrics({self._name(k): v for k, v in metrics.items()}, step=epoch)

    def on_train_end(self, run_context: Any) -> None:
        self.tracker.flush()

    @staticmethod
    def _learning_rate(cb: Any) -> float | None:
        optimizer = getattr(cb, "optimizer", None)
        if optimizer is None:
            return None
        try:
            return _scalar(optimizer.get_lr())
        except Exception:  # noqa: BLE001 - custom optimizers may not have get_lr
            return None
