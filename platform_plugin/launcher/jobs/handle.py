"""`BackgroundJob`: the handle of a job running in a launcher process of its own
(background.py starts it): its state and result read from its folder (records.py), `wait()`,
`stop()` (stopping.py), and its live board in the kernel that started it (live.py, loaded only
there).
"""
from __future__ import annotations

import subprocess
import threading
from typing import Callable

from platform_plugin.launcher.jobs.records import read_record
from platform_plugin.launcher.jobs.stopping import request_stop, wait_ended
from platform_plugin.launcher.processes.result import JobFailed, JobResult, JobStatus


class BackgroundJob:
    """The handle of a job running in its own process: `job_id`, `job_dir`, `state` (running,
    succeeded, failed, interrupted, lost), `result` (None while it runs), `wait()`, `stop()`."""

    def __init__(self, job_id: str, job_dir: str, *, how: str = "background",
                 process: subprocess.Popen | None = None, check: bool = True,
                 result: JobResult | None = None) -> None:
        self.job_id, self.job_dir, self.how = job_id, job_dir, how
        self.process = process
        self.check = check
        self._result = result
        self.board: threading.Thread | None = None  # the live board in the starting cell

    def show_board(self, publish: Callable[[dict], object]) -> None:
        """The job's live board, published from a thread until the job ended (a kernel: the
        cell that started it returns, the board goes on)."""
        # the board's rendering is loaded in a kernel only: a CLI launch never draws one
        from platform_plugin.launcher.jobs.live import LiveBoard
        self.board = LiveBoard(self.job_dir, publish).in_thread()

    @property
    def state(self) -> str:
        if self._result is not None:
            return _STATES.get(str(self._result.status), "failed")
        return read_record(self.job_dir).state

    @property
    def result(self) -> JobResult | None:
        if self._result is None:
            record = read_record(self.job_dir)
            if not record.running and self._launcher_gone():
                self._result = record.result() or _lost(record.job_id, record.job_dir)
        return self._result

    def _launcher_gone(self) -> bool:
        return self.process is None or self.process.poll() is not None

    def wait(self, timeout: float | None = None) -> JobResult:
        """The result once the job ended; raises JobFailed when it failed or was stopped
        (unless started with check=False), TimeoutError when `timeout` passed first."""
        __tracebackhide__ = True
        if self._result is None:
            if self.process is not None:
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    raise TimeoutError(f"job {self.job_id} still runs after {timeout:g}s") \
                        from None
            record = wait_ended(self.job_dir, timeout)
            if record.running:
                raise TimeoutError(f"job {self.job_id} still runs after {timeout:g}s")
        result = self.result
        if result is None:  # (the launcher ended; its job.json is gone or another version's)
            result = _lost(self.job_id, self.job_dir)
        if self.check and not result.ok:
            raise JobFailed(result)
        return result

    def stop(self) -> JobResult:
        """Stop it as the stop button does; the result (JobFailed is not raised for it)."""
        record = read_record(self.job_dir)
        request_stop(record)
        check, self.check = self.check, False
        try:
            return self.wait()
        finally:
            self.check = check

    def __repr__(self) -> str:
        return f"<BackgroundJob {self.job_id} {self.state} ({self.how}); logs in {self.job_dir}>"


_STATES = {"succeeded": "succeeded", "interrupted": "interrupted"}


def _lost(job_id: str, job_dir: str) -> JobResult:
    return JobResult(job_id=job_id, job_name="", job_dir=job_dir, backend="",
                     status=JobStatus.FAILED, ok=False, duration_s=0.0, exitcodes={},
                     reason="lost: its launcher ended without writing a result (killed?)")
