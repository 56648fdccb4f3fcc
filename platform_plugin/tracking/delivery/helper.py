"""The forwarding helper: one process per launched job that ships the ranks' spools to the sink.

The launcher starts it once the ranks run (`tracking/job/handle.start_helper`), so MLflow's
import (seconds and hundreds of MiB: docs/benchmarks.md), the store's first open (under its
lock), the experiment and the runs never stand in front of a rank, and never live in the
launcher's (or a notebook kernel's) memory:

    python -m platform_plugin.tracking.delivery.helper SPOOL_DIR

Its stdin is a pipe from the launcher. The launcher writes `end.json` (final status, drain
deadline) when the ranks have ended and closes the pipe; the helper delivers until everything
is in or the deadline passed, then ends the runs (a run with records still pending stays
RUNNING, tagged, for `platform-run sync`) and exits. If the pipe closes without an `end.json`
the launcher died: the helper delivers for PLATFORM_TRACKING_DRAIN_TIMEOUT (default 10) seconds
more and exits, leaving the runs open (`platform-run sync JOB --end FAILED`). A server that
refuses the credentials (HTTP 401/403) ends it at once: the records wait for a `sync` with
credentials that work, and the launcher's report says what to fix.
Progress and the last error are in `helper.json`; its own stderr goes to `helper.log`.
"""
from __future__ import annotations

import os
import select
import sys
import time
from pathlib import Path
from typing import Any

from platform_plugin.tracking.shared.aggregates import job_aggregates
from platform_plugin.tracking.delivery.forwarder import Forwarder
from platform_plugin.tracking.delivery.observers import make_observers
from platform_plugin.tracking.delivery.offsets import any_spooled, drain_timeout
from platform_plugin.tracking.shared.state import SINK_FILE, HelperStatus, JobEnd, SinkConfig
from platform_plugin.tracking.sinks import get_sink

PASS_INTERVAL_S = 0.25  # between passes while ranks run; a pass with nothing new is cheap
IDLE_BEFORE_IMPORT_S = 3.0  # at most, before the helper imports MLflow with nothing to deliver
MAX_BACKOFF_S = 5.0  # a sink that is down is retried at most this far apart
AGGREGATE_BATCHES = 4  # aggregates ship in batches as large as a round of 4 streams' batches
STREAM_WORKERS = 4  # streams forwarded at once (one thread per stream at a time: order kept)


class Helper:
    """The helper's work. Until a rank spooled something or the job ended it only waits; then it
    sets up the forwarder and the sink, which imports MLflow (seconds of CPU), not while the
    ranks start."""

    def __init__(self, spool_dir: Path, control: Any | None = None) -> None:
        self.spool_dir = Path(spool_dir)
        self.status = HelperStatus(pid=os.getpid())
        config = SinkConfig.load(self.spool_dir)
        if config is None:  # the launcher writes it before it starts the helper: a removed folder
            self.status.phase, self.status.error = "done", f"no {SINK_FILE} in {self.spool_dir}"
        self.status.save(self.spool_dir)
        if config is None:
            raise FileNotFoundError(self.status.error)
        self.config = config
        self.control = control  # the launcher's pipe: EOF = launcher done or dead
        self.orphaned = False
        self.orphan_stop: float | None = None  # the launcher died: deliver until then
        self.forwarder: Forwarder  # made by _set_up(), after the idle wait

    def _set_up(self) -> None:
        sink = get_sink(self.config.sink)
        self.forwarder = Forwarder(self.spool_dir, self.config, sink, workers=STREAM_WORKERS,
                                   observers=make_observers(self.config, sink, self.spool_dir),
                                   aggregates=job_aggregates(self.config, sink, self.spool_dir,
                                                             AGGREGATE_BATCHES))
        self.forwarder.stop_at = self.orphan_stop

    def run(self) -> None:
        self._set(phase="forwarding")
        self._idle_until_work()
        self._set_up()
        backoff = PASS_INTERVAL_S
        end = None
        while True:
            if not self.spool_dir.is_dir():
                return  # the job folder was removed: nothing is left to deliver or to end
            end = JobEnd.load(self.spool_dir) or end  # once seen, the job has ended
            if end is not None:
                self.forwarder.stop_at = end.deadline
            try:
                ok = self.forwarder.pump()
            except OSError as exc:  # a full disk: offsets cannot be saved; the spool stays whole
                ok = False
                self.forwarder.last_error = f"{exc.strerror or exc} in {self.spool_dir}"[:500]
            self._set(error=self.forwarder.last_error)
            if self.forwarder.refused_access:  # asking again repeats the refusal: sync, once fixed
                self._set(phase="done")
                return
            if (end is not None or self.orphaned) and (self.forwarder.past_deadline()
                                                       or (ok and self.forwarder.all_delivered())):
                break
            backoff = PASS_INTERVAL_S if ok else min(backoff * 2, MAX_BACKOFF_S)
            self._wait(backoff)
        if end is not None:
            self._end_runs(end)
        self._set(phase="done")

    def _idle_until_work(self) -> None:
        """MLflow's import is seconds of CPU: on a small machine it would compete with the ranks'
        own start. Wait (stdlib only) until a rank spooled something, the job ended, or
        IDLE_BEFORE_IMPORT_S passed (the runs then appear while a job that logs nothing runs)."""
        until = time.monotonic() + IDLE_BEFORE_IMPORT_S
        while time.monotonic() < until and self.spool_dir.is_dir() and not self.orphaned:
            if JobEnd.load(self.spool_dir) is not None or any_spooled(self.spool_dir, on_error=True):
                return
            self._wait(PASS_INTERVAL_S)

    def _wait(self, seconds: float) -> None:
        """Sleep, but wake at once when the launcher closes the pipe (job ended or launcher
        died); a pipe closed without end.json means the launcher died."""
        if self.control is None:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([self.control], [], [], seconds)
        if ready and not os.read(self.control.fileno(), 4096):  # EOF
            self.control = None
            if JobEnd.load(self.spool_dir) is None and not self.orphaned:
                self.orphaned = True
                self.orphan_stop = time.time() + drain_timeout(10)
                if hasattr(self, "forwarder"):  # else _set_up() gives it the deadline
                    self.forwarder.stop_at = self.orphan_stop

    def _end_runs(self, end: JobEnd) -> None:
        self._set(phase="ending")
        for observer in self.forwarder.observers:
            if hasattr(observer, "job_ending"):
                try:
                    observer.job_ending(end.status)
                except Exception as exc:  # noqa: BLE001 - reported, the runs still end
                    self._set(error=f"observer {type(observer).__name__}: {exc}"[:500])
        if self.forwarder.sink.unavailable(self.config):
            return  # the runs stay open; sync ends them
        if self.forwarder.aggregates is not None:
            self.forwarder.aggregates.finish()  # the steps some rank never completed
            problems = self.forwarder.aggregates.problems()
            if problems:
                print(problems, file=sys.stderr, flush=True)  # helper.log
        pending = {label: self.forwarder.stream_pending(label) for label in self.forwarder.labels()}
        self.config.final_status = end.status
        self.config.job["end_reason"] = end.reason  # a multi-server parent names the server
        self.config.job["gone_servers"] = end.gone  # ... and ends for those that cannot
        self.config.job["keep_parent_open"] = not end.last  # --max-restarts: another attempt
        try:
            ended = self.forwarder.sink.end_job(self.config, self.spool_dir, pending)
        except Exception as exc:  # noqa: BLE001 - sync retries the ending
            self._set(error=f"cannot end runs: {type(exc).__name__}: {exc}"[:500])
            return
        finally:  # a job on several servers: the job-wide aggregates of the parent it ended
            if getattr(self.forwarder.sink, "aggregates_problem", ""):
                print(self.forwarder.sink.aggregates_problem, file=sys.stderr, flush=True)
        self.config.ended = bool(ended)
        self.config.save(self.spool_dir)
        self._set(runs_ended=bool(ended))

    def _set(self, **changes: Any) -> None:
        if any(getattr(self.status, k) != v for k, v in changes.items()):
            for k, v in changes.items():
                setattr(self.status, k, v)
            try:
                self.status.save(self.spool_dir)
            except OSError:  # a full disk: the status is a courtesy, the spool is what counts
                pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    helper = Helper(Path(args[0]), control=sys.stdin)
    try:
        helper.run()
    except Exception as exc:  # noqa: BLE001 - the spool keeps everything; say why in helper.json
        helper._set(phase="done", error=f"helper failed: {type(exc).__name__}: {exc}"[:500])
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
