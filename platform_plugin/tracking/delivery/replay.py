"""`platform-run sync`: deliver what a job's spool still holds, exactly once (see forwarder),
then end the job's runs if the job has ended and they were left open (with the status the
launcher recorded in end.json, or `--end`)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from platform_plugin.errors import ConfigError
from platform_plugin.tracking.delivery import store_move
from platform_plugin.tracking.delivery.forwarder import Counts, Forwarder
from platform_plugin.tracking.sinks import get_sink
from platform_plugin.tracking.delivery.state import JobEnd, SinkConfig

# A sink that has just (re)started, or a loaded machine, can refuse or time out for a while
# (MLflow's first request on a restarted server opens its store; the health probe allows 2 s).
# sync keeps retrying transient failures with growing pauses for up to `wait` seconds; the
# offset files make every retry resume exactly where the last accepted batch ended.
DEFAULT_WAIT_S = 30.0
FIRST_PAUSE_S, MAX_PAUSE_S = 0.5, 5.0


@dataclass
class SyncResult:
    spool_dir: Path
    delivered_now: int
    counts: Counts
    ended: bool
    error: str
    attempts: int = 1


def deliver_all(forwarder: Forwarder, wait: float) -> int:
    """Passes until one succeeds (every complete line delivered) or `wait` seconds passed;
    returns the passes made. Lines a still-running rank adds meanwhile are left for the live
    forwarder (they count as pending). A stream another process is forwarding is waited for
    (within the same `wait`) instead of raced."""
    deadline = time.monotonic() + wait
    pause, attempts = FIRST_PAUSE_S, 0
    while True:
        attempts += 1
        if forwarder.pump(blocking=True, lock_timeout=max(0.0, deadline - time.monotonic())):
            return attempts
        left = deadline - time.monotonic()
        if left <= 0:
            return attempts
        time.sleep(min(pause, left))
        pause = min(pause * 2, MAX_PAUSE_S)


def sync_spool_dir(spool_dir: Path, *, end_status: str | None = None,
                   wait: float = DEFAULT_WAIT_S, to: str | None = None,
                   from_start: bool = False, job: str = "JOB") -> SyncResult:
    """`to`: move the job to this store first (store_move.py; `from_start`: the whole job
    again); `job`: its name in messages."""
    config = SinkConfig.load(spool_dir)
    if config is None:
        raise ConfigError(f"{spool_dir} has no sink.json: not a tracking spool folder",
                          code="TRACKING_JOB")
    sink = None if to is None else get_sink(config.sink)
    if to is not None and store_move.move_to(spool_dir, config, to, sink, from_start):
        config = SinkConfig.load(spool_dir) or config
    store_move.check_store_there(spool_dir, config, job)  # before any MLflow import
    sink = sink or get_sink(config.sink)
    forwarder = Forwarder(spool_dir, config, sink)
    if forwarder.counts().pending or not config.ended:  # something to send into it
        store_move.check_runs_there(spool_dir, config, sink, job)
    before = forwarder.counts().delivered
    attempts = deliver_all(forwarder, wait)
    counts = forwarder.counts()
    config = SinkConfig.load(spool_dir) or config  # run ids a live helper may have added
    forwarder.config = config
    end = JobEnd.load(spool_dir)
    config.final_status = end_status or config.final_status or (end.status if end else None)
    ended = config.ended
    if config.final_status and not config.ended and counts.pending == 0 and not forwarder.last_error:
        try:
            forwarder.sink.end_job(config, spool_dir, {})
            config.ended = ended = True
            config.save(spool_dir)
        except Exception as exc:  # noqa: BLE001 - reported, the next sync retries
            forwarder.last_error = f"cannot end runs: {type(exc).__name__}: {exc}"
    return SyncResult(spool_dir, counts.delivered - before, counts, ended, forwarder.last_error, attempts)
