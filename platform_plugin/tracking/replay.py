"""`platform-run sync`: deliver what a job's spool still holds, exactly once (see forwarder),
then end the job's runs if the job has ended and they were left open."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .forwarder import Counts, Forwarder
from .sinks import get_sink
from .state import SinkConfig


ATTEMPTS, RETRY_PAUSE_S = 3, 2.0


@dataclass
class SyncResult:
    spool_dir: Path
    delivered_now: int
    counts: Counts
    ended: bool
    error: str


def sync_spool_dir(spool_dir: Path, *, end_status: str | None = None) -> SyncResult:
    config = SinkConfig.load(spool_dir)
    if config is None:
        raise ConfigError(f"{spool_dir} has no sink.json: not a tracking spool folder",
                          code="TRACKING_JOB")
    forwarder = Forwarder(spool_dir, config, get_sink(config.sink))
    before = forwarder.counts().delivered
    for attempt in range(ATTEMPTS):  # a server that has just (re)started may still refuse once
        # blocking: waits for a live forwarder's pass on a stream instead of racing it
        if forwarder.pump(blocking=True) and forwarder.counts().pending == 0:
            break
        if attempt + 1 < ATTEMPTS:
            time.sleep(RETRY_PAUSE_S)
    counts = forwarder.counts()
    if end_status:
        config.final_status = end_status
    ended = config.ended
    if config.final_status and not config.ended and counts.pending == 0 and not forwarder.last_error:
        try:
            forwarder.sink.end_job(config, spool_dir)
            config.ended = ended = True
            config.save(spool_dir)
        except Exception as exc:  # noqa: BLE001 - reported, the next sync retries
            forwarder.last_error = f"cannot end runs: {type(exc).__name__}: {exc}"
    return SyncResult(spool_dir, counts.delivered - before, counts, ended, forwarder.last_error)
