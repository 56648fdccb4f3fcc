"""Ships spooled records to a sink, at least once, made exactly once by the offset file.

For each stream (one spool file per rank), under that stream's flock:
  1. read complete lines after the delivered offset (decoded once, kept between turns),
  2. cut the next batch within the sink's limits,
  3. deliver it, then at once write the offset just past it (atomic rename).
Streams take turns, one batch each per round, so the ranks' points of one step arrive close
together (the per-step aggregates across ranks need every rank's point of a step).
A crash between 2's send and 3's rename is the only window in which a batch can be sent twice;
MLflow's SQL store ignores an exact repeat of a metric (same key, value, step, timestamp - the
timestamp is taken in the rank and kept in the spool) and of a param, so the replay adds nothing
there. `sync` and a live forwarder cannot overlap on a stream (the flock).

Nothing blocks a stream for good: a line too large to deliver is copied to
`<stream>.jsonl.quarantine` and passed; a record the sink refuses for good (`is_permanent`: an
out-of-range number, a name MLflow refuses, a deleted run) is found by sending the refused batch
in halves, set aside in `<stream>.jsonl.rejected` with the store's reason, counted as rejected
and passed; a failure that may pass (a server down, a locked database, a timeout) keeps the
batch for the next pass. A server that turns the requests away for their credentials
(`refuses_access`: HTTP 401/403) stops the forwarder: `refused_access` says what to fix, every
record waits in the spool for a `sync` with the right credentials, and no pass asks again.
`["r", ...]` lines (refused by the tracker in the rank) are counted only. An artifact record
ships only the copy the tracker made under the spool folder (artifacts.py): any other is set
aside with the reason, as a refused record is.
A round's turns run in parallel (`workers` threads, one stream per thread at a time, so each
stream keeps its order). Observers (`delivered(label, records)`) see every accepted batch.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from platform_plugin.tracking.delivery import offsets
from platform_plugin.tracking.delivery.artifacts import StagedArtifacts
from platform_plugin.tracking.delivery.offsets import Counts, drain_timeout, spool_labels  # noqa: F401
from platform_plugin.tracking.delivery.reading import (Passed, Reading, advance, batches,  # noqa: F401
                                                       next_batch, set_records_aside)
from platform_plugin.tracking.shared.aggregates import JobAggregates
from platform_plugin.tracking.shared.state import SinkConfig, StreamState, stream_lock
from platform_plugin.tracking.rank.identity import stream_name
from platform_plugin.tracking.rank.spool import MAX_LINE_BYTES, SPOOL_SUFFIX, read_complete
from platform_plugin.util.regular_file import reason

# bytes of a stream decoded at a time (kept between turns): more than one line's maximum
READ_BYTES = 2 * MAX_LINE_BYTES


class Forwarder:
    """`pump()` does one pass; `start()` runs passes on a thread; `drain(timeout)` stops the
    thread after a last complete pass (or when the time is up). `stop_at` (epoch seconds): no
    batch is sent after it (the drain deadline, kept across processes)."""

    def __init__(self, spool_dir: Path, config: SinkConfig, sink: Any, *, labels: list[str] | None = None,
                 interval: float = 0.5, workers: int = 1, observers: list | None = None,
                 aggregates: JobAggregates | None = None) -> None:
        self.aggregates = aggregates  # aggregates.JobAggregates: per-step stats for the job run
        self.spool_dir = Path(spool_dir)
        self.config = config
        self.sink = sink
        self.only = labels  # None: every stream in the folder
        self.interval = interval
        self.workers = workers
        self.observers = list(observers or [])
        self.stop_at: float | None = None
        self.last_error = ""
        self.refused_access = ""  # the server turned the credentials away: what to fix
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: Any = None  # a ThreadPoolExecutor once needed
        self._observe_lock = threading.Lock()  # observers see one batch at a time
        self._readings: dict[str, Reading] = {}  # label -> its decoded, not yet delivered lines

    # --- one pass -------------------------------------------------------------------------
    def labels(self) -> list[str]:
        found = spool_labels(self.spool_dir)
        return [x for x in found if x in self.only] if self.only is not None else found

    def pump(self, *, blocking: bool = False, lock_timeout: float | None = None) -> bool:
        """Deliver everything complete. Not blocking (the live forwarder): a stream another
        process holds is skipped and counts as no failure. Blocking (sync): waits for each stream
        (at most `lock_timeout` s); one still held after that is a failure, named in last_error."""
        if self.refused_access:
            self.last_error = self.refused_access
            return False
        down = self.sink.unavailable(self.config)
        if down:
            self.last_error = down
            return False
        labels = self.labels()
        try:
            self.sink.ensure_runs(self.config, self.spool_dir, sorted(set(labels) | set(self.config.ranks)))
        except Exception as exc:  # noqa: BLE001 - a sink error must never reach training
            self.last_error = (self.access_refused(exc)
                               or f"cannot create runs: {type(exc).__name__}: {exc}"[:500])
            return False
        deadline = None if lock_timeout is None else time.monotonic() + lock_timeout

        def turn(label: str) -> tuple[bool, bool]:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self._pump_stream(label, blocking, left)

        ok, active = True, labels
        while active and not self.past_deadline():
            # one batch per stream per round: the streams advance together, so the per-step
            # aggregates find every rank's point of a step close together (bounded memory)
            if len(active) > 1 and self._joint():
                results = self._joint_round(active, blocking, deadline)
            elif self.workers > 1 and len(active) > 1:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="tracking-stream")
                results = list(self._pool.map(turn, active))
            else:
                results = [turn(label) for label in active]  # every stream gets its turn
            ok = ok and all(good for good, _ in results)
            active = [label for label, (good, more) in zip(active, results) if good and more]
            if self.aggregates is not None:
                with self._observe_lock:  # its failures are its own (last_error): points come first
                    self.aggregates.send(full_only=bool(active))
        if ok:
            self.last_error = ""
        return ok

    def past_deadline(self) -> bool:
        return self.stop_at is not None and time.time() >= self.stop_at

    def _pump_stream(self, label: str, blocking: bool, lock_timeout: float | None = None) -> tuple[bool, bool]:
        """One turn of a stream: deliver its next batch. (ok, more to deliver after it)."""
        stream = stream_name(label)
        with stream_lock(self.spool_dir, stream, blocking=blocking, timeout=lock_timeout) as held:
            if not held or self.past_deadline():  # not held: another forwarder (a sync) is on it
                return self._not_held(stream, blocking and not held)
            state = StreamState.load(self.spool_dir, stream)
            try:
                reading = self._reading(label, stream, state)
            except OSError as exc:  # gone, or no regular file (a FIFO, a link planted there)
                return self._unreadable(stream, exc)
            if reading is None:
                return True, False  # nothing complete after the offset
            return self._deliver_turn(label, stream, state, reading), True

    def _reading(self, label: str, stream: str, state: StreamState) -> "Reading | None":
        """The decoded lines after the stream's offset: kept from the last turn while the offset
        is where that turn left it (another process may have delivered meanwhile), else read."""
        reading = self._readings.get(label)
        if reading is None or reading.offset != state.offset:
            spool = self.spool_dir / f"{stream}{SPOOL_SUFFIX}"
            chunk = read_complete(spool, state.offset, READ_BYTES)
            if chunk.end == state.offset:
                self._readings.pop(label, None)
                return None
            reading = self._readings[label] = Reading(
                chunk, state.offset, Passed(chunk, spool, self.spool_dir / f"{stream}.jsonl.quarantine"))
        return reading

    def _deliver_turn(self, label: str, stream: str, state: StreamState, reading: Reading) -> bool:
        batch = next_batch(reading, self._limits())
        return self._after_send(label, stream, state, reading, batch,
                                not batch or self._send(label, state, batch))

    def _joint(self) -> bool:
        """Whether the sink takes a round of all streams in one call (`joins_rounds`, asked once
        the store is open); else streams go in parallel threads (e.g. requests to a server)."""
        joins = getattr(self.sink, "joins_rounds", None)
        return bool(joins and joins(self.config))

    def _limits(self) -> dict[str, int]:
        return self.sink.batch_limits(self.config) if hasattr(self.sink, "batch_limits") else self.sink.limits

    def _after_send(self, label: str, stream: str, state: StreamState, reading: Reading, batch: list,
                    sent: bool) -> bool:
        if not sent:
            state.save(self.spool_dir, stream)
            self._readings.pop(label, None)
            return False
        if advance(state, reading, batch):
            self._readings.pop(label, None)
        state.save(self.spool_dir, stream)
        return True

    def _joint_round(self, labels: list[str], blocking: bool, deadline: float | None) -> list[tuple[bool, bool]]:
        """One batch of every stream in one sink call (`deliver_round`: one transaction instead
        of one per stream - a commit is an fsync). If that call fails, each stream's batch goes
        alone, so a refused record or a dead run is isolated as in a turn of its own."""
        results: dict[str, tuple[bool, bool]] = {}
        with ExitStack() as locks:
            taken = []
            for label in labels:
                stream = stream_name(label)
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                held = locks.enter_context(stream_lock(self.spool_dir, stream, blocking=blocking, timeout=left))
                if not held or self.past_deadline():
                    results[label] = self._not_held(stream, blocking and not held)
                    continue
                state = StreamState.load(self.spool_dir, stream)
                try:
                    reading = self._reading(label, stream, state)
                except OSError as exc:
                    results[label] = self._unreadable(stream, exc)
                    continue
                if reading is None:
                    results[label] = (True, False)
                    continue
                taken.append((label, stream, state, reading, next_batch(reading, self._limits())))
            joint = self._deliver_jointly([(label, state, batch) for label, _, state, _, batch in taken])
            for label, stream, state, reading, batch in taken:
                sent = (self._accepted(label, state, batch) if joint
                        else not batch or self._send(label, state, batch))
                results[label] = (self._after_send(label, stream, state, reading, batch, sent), True)
        return [results[label] for label in labels]

    def _unreadable(self, stream: str, exc: OSError) -> tuple[bool, bool]:
        if isinstance(exc, FileNotFoundError):
            return True, False  # removed meanwhile: nothing to deliver
        self.last_error = f"cannot read the spool of {stream}: {reason(exc)}"[:500]
        return False, False

    def _not_held(self, stream: str, failed: bool) -> tuple[bool, bool]:
        if failed:
            self.last_error = (f"{stream} is being forwarded by another process (a launcher "
                               "still delivering, or stuck in MLflow's HTTP retries)")
        return not failed, False

    def _deliver_jointly(self, items: list) -> bool:
        sendable = [(label, state, [r for r, _ in batch if r[0] != "r"]) for label, state, batch in items]
        sendable = [item for item in sendable if item[2]]
        if len(sendable) < 2 or any(r[0] == "a" for _, _, records in sendable for r in records):
            return False  # an artifact's file is checked in a stream's own turn (_send)
        try:
            self.sink.deliver_round(self.config, sendable)
            return True
        except Exception:  # noqa: BLE001 - each stream's batch is retried alone
            return False

    def _accepted(self, label: str, state: StreamState, batch: list) -> bool:
        records = [record for record, _ in batch if record[0] != "r"]
        state.refused += len(batch) - len(records)
        state.delivered += len(records)
        if records:
            self._observe(label, records)
        return True

    def _send(self, label: str, state: StreamState, batch: list[tuple[list, int]]) -> bool:
        refused = sum(1 for record, _ in batch if record[0] == "r")
        records = [record for record, _ in batch if record[0] != "r"]
        if records:
            # counted (and set aside) once the whole batch is through: after a transient failure
            # midway it is resent whole, and its delivered part must not count (or be
            # aggregated) twice, nor its refused part be set aside twice
            with StagedArtifacts(self.spool_dir) as staged:  # an artifact's file: the rank's copy only
                sendable, set_aside = staged.stage(records)
                accepted: list = []
                if sendable and not self._send_records(label, state, sendable, accepted, set_aside):
                    return False
                accepted = [staged.original(record) for record in accepted]
                set_aside = [(staged.original(record), why) for record, why in set_aside]
            if set_aside:
                set_records_aside(self.spool_dir, stream_name(label), set_aside)
                state.rejected += len(set_aside)
                state.last_error = f"set aside {_shown(set_aside[-1][0])}: {set_aside[-1][1]}"[:500]
            state.delivered += len(accepted)
            if accepted:
                self._observe(label, accepted)
        state.refused += refused
        return True

    def _send_records(self, label: str, state: StreamState, records: list, accepted: list,
                      set_aside: list) -> bool:
        """Deliver `records`: what the store took goes to `accepted`, what it refuses for good
        to `set_aside` as (record, reason). False on a transient failure (the batch is resent
        later; the sink ignores what it already has)."""
        try:
            self.sink.deliver(self.config, label, state, records)
        except Exception as exc:  # noqa: BLE001
            if self.access_refused(exc) or not self.sink.is_permanent(exc):
                self.last_error = state.last_error = (self.refused_access
                                                      or f"{type(exc).__name__}: {exc}"[:500])
                return False
            reason = f"{type(exc).__name__}: {exc}"[:500]
            if len(records) == 1 or self._refuses_run(exc):  # the run refuses every record alike
                set_aside += [(record, reason) for record in records]
                return True
            return self._in_halves(label, state, records, accepted, set_aside)
        accepted += records
        return True

    def access_refused(self, exc: BaseException) -> str:
        """What to fix when the server turned the credentials away (kept: no pass asks again)."""
        refuses_access = getattr(self.sink, "refuses_access", None)
        self.refused_access = self.refused_access or (
            refuses_access and refuses_access(self.config.tracking_uri or "", exc)) or ""
        return self.refused_access

    def _refuses_run(self, exc: BaseException) -> bool:
        refuses_run = getattr(self.sink, "refuses_run", None)
        return bool(refuses_run and refuses_run(exc))

    def _in_halves(self, label: str, state: StreamState, records: list, accepted: list,
                   set_aside: list) -> bool:
        """Refused for good: in halves until what is refused is alone, so the rest still go (a
        request too large for the server, HTTP 413, passes in halves; one bad record costs ~2
        log2(n) requests, not n). A first half refused whole hints that all are bad: the
        second half then goes one by one - n + log2(n) requests when every record is refused,
        not 2n - 1 (a refusal of the run itself sets the whole batch aside at once)."""
        half = len(records) // 2
        before = len(set_aside)
        if not self._send_records(label, state, records[:half], accepted, set_aside):
            return False
        if len(set_aside) - before < half:
            return self._send_records(label, state, records[half:], accepted, set_aside)
        return all(self._send_records(label, state, [record], accepted, set_aside)
                   for record in records[half:])

    def _observe(self, label: str, records: list) -> None:
        """Observers (e.g. per-step aggregates) see each accepted batch; one failing must not
        stop delivery, so its error is kept in last_error and the batch counts as delivered."""
        observers = self.observers + ([self.aggregates] if self.aggregates is not None else [])
        with self._observe_lock:  # streams are forwarded in parallel; observers need not be thread-safe
            for observer in observers:
                try:
                    observer.delivered(label, records)
                except Exception as exc:  # noqa: BLE001
                    self.last_error = f"observer {type(observer).__name__}: {type(exc).__name__}: {exc}"[:500]

    # --- totals ---------------------------------------------------------------------------
    def counts(self) -> Counts:
        return offsets.totals(self.spool_dir, self.labels(), [self.last_error] if self.last_error else [])

    def stream_pending(self, label: str) -> int:
        return offsets.stream_pending(self.spool_dir, label)

    def all_delivered(self) -> bool:
        """Cheap: every stream's offset is at its last complete line."""
        return offsets.all_delivered(self.spool_dir, self.labels())

    # --- background thread ----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="tracking-forwarder", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        backoff = self.interval
        while not self._stop.is_set():
            ok = self.pump()
            backoff = self.interval if ok else min(backoff * 2, 10.0)
            self._stop.wait(backoff)

    def drain(self, timeout: float) -> bool:
        """Stop the thread and make final passes until everything complete is delivered or
        `timeout` passes. Never waits longer than `timeout`, and sends nothing after it (a
        request stuck in MLflow's retries keeps running on the abandoned daemon thread)."""
        self.stop_at = time.time() + timeout
        deadline = time.monotonic() + timeout
        if self._thread is not None:
            self._stop.set()
            self._thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                self.last_error = self.last_error or "forwarder still busy at the drain deadline"
                return False
        while time.monotonic() < deadline:
            if self.pump(blocking=False) and self.all_delivered():
                return True
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        return self.all_delivered()


def _shown(record: list) -> str:
    """A record in a message: its kind and name, not a 6,000-character value."""
    return str(record[:2])[:200]
