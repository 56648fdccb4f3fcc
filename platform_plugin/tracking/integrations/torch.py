"""PyTorch: a small helper for a plain training loop - loss, step time and samples/s per step.

    from platform_plugin.tracking.integrations.torch import LoopLogger
    log = LoopLogger()
    for x, y in loader:
        loss = ...; loss.backward(); opt.step()
        log.step(loss, batch_size=len(x))
    log.epoch_end()

Rank-aware through the tracker (each rank its own run). `step()` calls `loss.item()`, which
waits for the device: pass `every=N` to sync only every N steps.
"""
from __future__ import annotations

import time
from typing import Any

from platform_plugin.tracking.rank.tracker import get_tracker


class LoopLogger:
    def __init__(self, tracker: Any | None = None, *, every: int = 1, prefix: str = "") -> None:
        self.tracker = tracker or get_tracker()
        self.every = max(1, int(every))
        self.prefix = prefix
        self.global_step = 0
        self.epoch = 0
        self._last = time.perf_counter()
        self._epoch_start = self._last
        self._epoch_samples = 0
        self._epoch_losses: list[float] = []

    def step(self, loss: Any, batch_size: int | None = None, **extra: Any) -> None:
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        self.global_step += 1
        self._epoch_samples += batch_size or 0
        if self.global_step % self.every:
            return
        value = float(loss.item() if hasattr(loss, "item") else loss)
        self._epoch_losses.append(value)
        metrics = {"loss": value, "step_time_s": seconds, **extra}
        if batch_size and seconds > 0:
            metrics["samples_per_s"] = batch_size / seconds
        self.tracker.log_metrics({self.prefix + k: v for k, v in metrics.items()}, step=self.global_step)

    def epoch_end(self, **extra: Any) -> None:
        now = time.perf_counter()
        seconds = now - self._epoch_start
        metrics = {"epoch_time_s": seconds, **extra}
        if self._epoch_losses:
            metrics["epoch_loss"] = sum(self._epoch_losses) / len(self._epoch_losses)
        if self._epoch_samples and seconds > 0:
            metrics["epoch_samples_per_s"] = self._epoch_samples / seconds
        self.tracker.log_metrics({self.prefix + k: v for k, v in metrics.items()}, step=self.epoch)
        self.epoch += 1
        self._epoch_start = self._last = now
        self._epoch_samples = 0
        self._epoch_losses = []
