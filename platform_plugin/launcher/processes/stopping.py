"""What the supervisor does only when a job does not end well: begin a stop (a failure, a timeout,
a hang, an interrupt; the stacks of stuck ranks dumped first), a log disk that fails, and the
records of the processes that failed. Imported on the first of these (start-up time: a
successful job, the common start of every command line, does not compile it). Functions of the
supervisor's state, not a second owner of it: supervisor.py holds the loop and every field.
"""
from __future__ import annotations

import signal
import time

from platform_plugin.launcher.processes.result import JobStatus
from platform_plugin.launcher.processes.supervisor import _Stop

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from platform_plugin.launcher.processes.rank_failure import RankFailure
    from platform_plugin.launcher.processes.supervisor import Supervisor, _Proc

# stops whose cause is where the ranks are stuck: their stacks are dumped first
DUMP_STATUSES = (JobStatus.TIMEOUT, JobStatus.HUNG, JobStatus.INTERRUPTED)


def begin_stop(sup: Supervisor, status: JobStatus, reason: str, remote: bool = False) -> None:
    """SIGTERM to the whole job now, SIGKILL after the grace (the loop sends it); the other
    servers' launchers are told, unless the stop came from them (`remote`)."""
    if status in DUMP_STATUSES:
        _dump_stacks(sup, reason)  # before SIGTERM: where each rank is stuck, not how it died
    sup._stop = _Stop(status, reason, kill_at=time.monotonic() + sup.grace)
    sup.output.note(f"{reason} (grace {sup.grace:g}s, then SIGKILL)")
    sup._job.signal(signal.SIGTERM, only_live_groups=False)
    if not remote:  # the other servers' launchers stop their ranks too (joblink.py)
        sup._notify("stopping", (status, reason))


def _dump_stacks(sup: Supervisor, why: str) -> None:
    live = {p.spec.name: p.popen.pid for p in sup.procs
            if p.ended is None and p.popen.poll() is None}
    if live:
        from platform_plugin.launcher.processes.stacks import dump_live  # only a hung job needs it
        sup._stacks.update(dump_live(live, sup.output, sup.plan.job_dir, why))


def log_failed(sup: Supervisor) -> None:
    """The logs are the job's record: a job that cannot keep them stops (or, if every rank
    already ended well, is not reported as a success: its logs are incomplete)."""
    reason = (f"the log disk is full or failing ({sup.output.log_failure}); the job cannot "
              "keep its logs. Free space there or give --log-dir on another disk")
    if sup._stop is None:
        begin_stop(sup, JobStatus.FAILED, reason)
    elif sup._stop.status == JobStatus.SUCCEEDED:
        sup._stop.status, sup._stop.reason = JobStatus.FAILED, reason
        sup.output.note(reason)


def failure_records(sup: Supervisor, failed: list[_Proc]) -> list[RankFailure]:
    """The failed processes' records, the root cause first, then the failures before those
    the launcher stopped."""
    failures = [_failure(sup, proc) for proc in failed]
    failures.sort(key=lambda f: (not f.root_cause, f.stopped_by_launcher, f.name))
    return failures


def _failure(sup: Supervisor, proc: _Proc) -> RankFailure:
    from platform_plugin.launcher.processes.rank_failure import RankFailure, describe_exit, ended_by
    exitcode, sig = describe_exit(proc.popen.returncode)
    return RankFailure(
        name=proc.spec.name, rank_id=proc.spec.rank_id, device_id=proc.spec.device_id,
        host=sup.host, pid=proc.popen.pid, exitcode=exitcode, signal_name=sig,
        runtime_s=(proc.ended or time.monotonic()) - proc.started,
        last_lines=_last_lines(sup, proc.spec.name),
        root_cause=proc.failure_order == 0 and not proc.ended_while_stopping,
        stopped_by_launcher=ended_by(proc.popen.returncode, proc.sent),
        after_signal=signal.Signals(proc.sent[-1]).name if proc.sent else None,
        stack=sup._stacks.get(proc.spec.name, []))


def _last_lines(sup: Supervisor, name: str) -> list[str]:
    try:
        return sup.output.tail(name)
    except KeyError:  # its log could not be opened (the disk refused): nothing was read
        return []
