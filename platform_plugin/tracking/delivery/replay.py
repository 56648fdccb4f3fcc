"""`platform-run sync`: deliver what a job's spool still holds, exactly once (see forwarder),
recompute the parent run's per-step aggregates of what it delivers (aggregates.py; a job on
several servers: over every rank from the store, once its parent ended), then end
the job's runs if the job has ended and they were left open (with the status the launcher
recorded in end.json, or `--end`).

One sync of a job at a time (the spool folder's `sync.lock`): a second one waits for the first
(within its `--wait`), then finds nothing left to send - the two reports' "sent" add up to what
was pending, and no batch goes twice. The live forwarding helper and a sync share the streams'
own locks."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from platform_plugin.errors import ConfigError, PlatformPluginError
from platform_plugin.tracking.delivery import store_move
from platform_plugin.tracking.shared.aggregates import job_aggregates
from platform_plugin.tracking.delivery.forwarder import READ_BYTES, Counts, Forwarder
from platform_plugin.tracking.shared.job_folders import later_attempt
from platform_plugin.tracking.delivery.reading import REJECTED_SUFFIX, set_aside_records
from platform_plugin.tracking.sinks import get_sink, mlflow_aggregates
from platform_plugin.tracking.shared.state import JobEnd, SinkConfig, StreamState, stream_lock
from platform_plugin.tracking.rank.identity import stream_name
from platform_plugin.tracking.rank.spool import SPOOL_SUFFIX, read_complete

# A sink that has just (re)started, or a loaded machine, can refuse or time out for a while
# (MLflow's first request on a restarted server opens its store; the health probe allows 2 s).
# sync keeps retrying transient failures with growing pauses for up to `wait` seconds; the
# offset files make every retry resume exactly where the last accepted batch ended.
DEFAULT_WAIT_S = 30.0
FIRST_PAUSE_S, MAX_PAUSE_S = 0.5, 5.0
SYNC_LOCK = "sync"  # <spool>/sync.lock: one sync of a job at a time
# points per stream and turn fed back to the aggregates: the streams advance together, as
# the forwarder's rounds do (a rank far ahead would fill the aggregator's open steps)
PRIME_SLICE = 1000


@dataclass
class SyncResult:
    spool_dir: Path
    delivered_now: int
    counts: Counts
    ended: bool
    error: str
    attempts: int = 1
    set_aside: str = ""  # what the store refused for good, and where it is kept
    aggregates: str = ""  # what the job-wide aggregates of a job on several servers lack


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
        if left <= 0 or forwarder.refused_access:  # the credentials will not change meanwhile
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
    lock_file = Path(spool_dir) / f"{SYNC_LOCK}.lock"
    made_lock = not lock_file.exists()
    with stream_lock(spool_dir, SYNC_LOCK, blocking=True, timeout=wait) as held:
        if not held:
            raise PlatformPluginError(f"{spool_dir}: another `platform-run sync` of this job is still "
                                      f"running after {wait:g} s; it delivers what is pending")
        try:
            return _sync(Path(spool_dir), config, end_status, wait, to, from_start, job)
        except ConfigError:
            if made_lock:  # a refusal leaves the job's folder as it found it
                lock_file.unlink(missing_ok=True)
            raise


def _sync(spool_dir: Path, config: SinkConfig, end_status: str | None, wait: float, to: str | None,
          from_start: bool, job: str) -> SyncResult:
    JobEnd.load(spool_dir)  # a damaged end.json is refused before any MLflow import
    sink = None if to is None else get_sink(config.sink)
    if to is not None and store_move.move_to(spool_dir, config, to, sink, from_start, job):
        config = SinkConfig.load(spool_dir) or config
    store_move.check_store_there(spool_dir, config, job)  # before any MLflow import
    sink = sink or get_sink(config.sink)
    forwarder = Forwarder(spool_dir, config, sink)
    counts = forwarder.counts()
    if counts.pending or not config.ended:  # something to send into it
        store_move.check_runs_there(spool_dir, config, sink, job)
    before, rejected_before = counts.delivered, counts.rejected
    # runs not ended: the helper did not finish the job's aggregates (killed, or out of time);
    # a helper still forwarding aggregates what it delivers itself
    if (counts.pending or not config.ended) and not store_move.live_helper(spool_dir):
        forwarder.aggregates = job_aggregates(config, sink, spool_dir)
        if forwarder.aggregates is not None:
            feed_delivered(forwarder, spool_dir)
    attempts = deliver_all(forwarder, wait)
    if forwarder.refused_access:
        raise store_move.refused(forwarder.refused_access, job)
    counts = forwarder.counts()
    config = SinkConfig.load(spool_dir) or config  # run ids a live helper may have added
    forwarder.config = config
    end = JobEnd.load(spool_dir)
    config.final_status = end_status or config.final_status or (end.status if end else None)
    if end is not None and not end.last and later_attempt(spool_dir):  # --max-restarts: the
        config.job["keep_parent_open"] = True  # latest attempt ends the runs it went on in
    ended = config.ended
    _finish_aggregates(forwarder, bool(config.final_status) and counts.pending == 0)
    ending = bool(config.final_status and not config.ended and counts.pending == 0
                  and not forwarder.last_error)
    if ending:
        try:
            forwarder.sink.end_job(config, spool_dir, {})
            config.ended = ended = True
            config.save(spool_dir)
        except Exception as exc:  # noqa: BLE001 - reported, the next sync retries
            if forwarder.access_refused(exc):
                raise store_move.refused(forwarder.refused_access, job) from None
            forwarder.last_error = f"cannot end runs: {type(exc).__name__}: {exc}"
    return SyncResult(spool_dir, counts.delivered - before, counts, ended, forwarder.last_error, attempts,
                      set_aside(spool_dir, forwarder.labels(), counts.rejected - rejected_before),
                      _job_wide(forwarder, config, ending, counts.delivered - before))


def _job_wide(forwarder: Forwarder, config: SinkConfig, ending: bool, delivered_now: int) -> str:
    """A job on several servers: what its parent's job-wide aggregates lack ("" when nothing).
    Ending this server's runs computes them if that ended the parent (mlflow_job.report_gone);
    points delivered after the parent had ended are aggregated here again, over every rank."""
    sink = forwarder.sink
    if config.servers <= 1 or config.sink != "mlflow" or config.layout != "runs":
        return ""
    if ending:
        return sink.aggregates_problem
    if not delivered_now or not config.parent_run_id:
        return ""
    return mlflow_aggregates.when_parent_ended(sink, config, config.tracking_uri or "")


def feed_delivered(forwarder: Forwarder, spool_dir: Path) -> None:
    """The points the store took before this sync, back into the aggregates (nothing sent):
    a step some ranks' points of which went before and others' go now is aggregated whole.
    The records set aside as refused are left out, as when they were delivered."""
    aggregates = forwarder.aggregates
    if aggregates is None:
        return
    streams = {label: _delivered_slices(spool_dir, label) for label in forwarder.labels()}
    while streams:
        for label in list(streams):
            part = next(streams[label], None)
            if part is None:
                del streams[label]
            else:
                aggregates.delivered(label, part)


def _delivered_slices(spool_dir: Path, label: str) -> Iterator[Any]:
    """A stream's delivered metric records, PRIME_SLICE at a time, read from its spool."""
    stream = stream_name(label)
    upto = StreamState.load(spool_dir, stream).offset
    refused = set_aside_records(spool_dir, stream)
    path, offset = spool_dir / f"{stream}{SPOOL_SUFFIX}", 0
    while offset < upto:
        chunk = read_complete(path, offset, READ_BYTES)
        if chunk.end == offset:
            return
        records = [record for record, end in chunk.records if end <= upto and record[0] == "m"]
        if refused:
            records = [r for r in records if json.dumps(r) not in refused]
        for start in range(0, len(records), PRIME_SLICE):
            yield records[start:start + PRIME_SLICE]
        offset = chunk.end


def _finish_aggregates(forwarder: Forwarder, job_over: bool) -> None:
    """Send what is ready; once the job is over and everything delivered, also the steps some
    rank never reached (as the helper does at the job's end)."""
    aggregates = forwarder.aggregates
    if aggregates is None:
        return
    if not (aggregates.finish() if job_over else aggregates.send()) and not forwarder.last_error:
        forwarder.last_error = aggregates.last_error


def set_aside(spool_dir: Path, labels: list[str], now: int) -> str:
    """What the job's store refused for good, or no store can take (a spool line that is no
    valid record): set aside, never sent again; for sync's report."""
    total = sum(StreamState.load(spool_dir, stream_name(label)).rejected for label in labels)
    if not total:
        return ""
    files = sorted(f"{stream_name(label)}{REJECTED_SUFFIX}" for label in labels
                   if os.path.exists(spool_dir / f"{stream_name(label)}{REJECTED_SUFFIX}"))
    return (f"{total} record(s) refused for good, by the store or as no valid record ({now} by "
            f"this sync), set aside with the reason in "
            f"{spool_dir}/{', '.join(files) or 'rank_*' + REJECTED_SUFFIX}")
