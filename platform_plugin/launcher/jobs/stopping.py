"""`platform-run stop JOB`, `%dist_stop [JOB]`, `BackgroundJob.stop()`: the job stopped as the
stop button stops it, from any process of the same user.

The stop is SIGINT to the job's launcher - what Ctrl-C in its terminal or the stop button of
its kernel sends -, so the launcher does what it always does then: the live ranks' stacks,
SIGTERM, SIGKILL after the grace, the result table, the runs ended KILLED. The launcher is
named by its pid AND start time from job.json (records.launcher_alive): a pid reused by another
process is never signalled. A second stop skips the grace, as a second Ctrl-C does.
"""
from __future__ import annotations

import os
import signal
import time

from platform_plugin.errors import ConfigError
from platform_plugin.launcher.jobs.records import JobRecord, launcher_alive, read_record
from platform_plugin.util.procfs import owner

WAIT_POLL_S = 0.1


def check_owner(record: JobRecord) -> None:
    """Another user's job is theirs to stop (JOB_NOT_YOURS)."""
    launcher = record.launcher
    uid = launcher.get("uid")
    pid = launcher.get("pid")
    found = owner(pid) if isinstance(pid, int) else None
    mine = os.getuid()
    if (uid is not None and uid != mine) or (found is not None and found != mine
                                             and record.launcher_alive):
        raise ConfigError(f"job {record.job_id} belongs to another user (uid "
                          f"{uid if uid is not None else found}): only they can stop it",
                          code="JOB_NOT_YOURS")


def request_stop(record: JobRecord) -> bool:
    """Send the stop to a running job's launcher; False when it had ended meanwhile (a stop
    racing the job's end: the job's own result stands)."""
    check_owner(record)
    if not record.running:
        return False
    if record.launcher_alive is None:
        raise ConfigError(f"job {record.job_id} runs on {record.launcher.get('host')}: stop it "
                          "there", code="JOB_ELSEWHERE")
    if not (record.data and launcher_alive(record.data)):  # between the check and now
        return False
    try:
        os.kill(int(record.launcher["pid"]), signal.SIGINT)
    except ProcessLookupError:
        return False
    except PermissionError:
        raise ConfigError(f"job {record.job_id}: its launcher (pid {record.launcher['pid']}) "
                          "is not yours to signal", code="JOB_NOT_YOURS") from None
    return True


def wait_ended(job_dir: str, timeout: float | None = None) -> JobRecord:
    """The job's record once it is no longer running (its launcher let go of it)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        record = read_record(job_dir)
        if not record.running:
            return record
        if deadline is not None and time.monotonic() >= deadline:
            return record
        time.sleep(WAIT_POLL_S)
