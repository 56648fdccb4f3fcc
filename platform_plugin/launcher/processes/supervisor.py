"""Start every process of a plan, pump their output, stop them all at the first failure.

One loop in the caller's thread does everything (no reader threads): it waits on the ranks'
pidfds (an exit wakes it at once), drains the rank pipes, feeds the output and checks the
deadlines. The pipes are read on a schedule and never polled: since Linux 5.16 a pipe that was
ever given to poll/epoll wakes its waiters on *every* write (`pipe->poll_usage`), which costs a
rank that prints a line at a time about twice the kernel time of its writes (bench/launch.py,
output section). The schedule: BATCH_S after a pass that read something, backing off to POLL_S
while the ranks are quiet. Stopping is a phase of the same loop, so output written while ranks
shut down still reaches the logs and the display.
A KeyboardInterrupt (Ctrl-C, kernel interrupt, the CLI's SIGTERM) starts the stop; a second
one skips the grace period. Every stop, a successful end included, covers the job's process
groups and the processes that left them but carry the job's JOB_ID (reaper.py).
The processes are spawned first (spawn.start_job): the supervisor takes them over, opens their
logs and watches them.
"""
from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import subprocess
import time
from typing import IO, Callable

from platform_plugin.launcher.display.output import Output
from platform_plugin.launcher.planning.plan import LaunchPlan, RankSpec
from platform_plugin.launcher.processes.error_file import ERROR_FILE_VARIABLE, recorded_error
from platform_plugin.launcher.processes.reaper import JobProcesses, described, signal_pids
from platform_plugin.launcher.processes.result import (JobResult, JobStatus, RankFailure,
                                                       describe_exit, ended_by, how_it_ended)
from platform_plugin.launcher.processes.stacks import dump_live
from platform_plugin.launcher.processes.spawn import PIPE_SIZE, Started, enlarge_pipe, pidfd, piped

POLL_S = 0.05  # the longest wait between two passes (quiet ranks: the display lags <= 50 ms)
CHECK_S = 0.02  # how often exits and deadlines are checked while output flows
# Pipes are drained in 64 KiB pieces, each written out before the next read: every object the
# display makes of a piece then stays below glibc's mmap/trim thresholds and reuses heap memory
# (larger reads make every chunk fresh memory from the kernel: page faults).
READ_SIZE = 1 << 16
UNKILLABLE_S = 10.0  # after SIGKILL, stop waiting for processes stuck in uninterruptible sleep
BATCH_S = 0.005  # the wait after a pass that read something: chatty ranks fill the pipes meanwhile
# stops whose cause is where the ranks are stuck: their stacks are dumped first
DUMP_STATUSES = (JobStatus.TIMEOUT, JobStatus.HUNG, JobStatus.INTERRUPTED)


@dataclasses.dataclass(eq=False)  # a process, not a value: equal only to itself
class Proc:
    """A running process of the job, as the supervisor tracks it. `sent`: the launcher's
    signals to the job before its end was seen."""

    spec: RankSpec
    popen: subprocess.Popen
    started: float
    ended: float | None = None
    eof: bool = False
    ended_while_stopping: bool = False
    failure_order: int | None = None
    pidfd: int | None = None
    sent: tuple[int, ...] = ()


@dataclasses.dataclass
class _Stop:
    """A stop in progress: why, and when SIGKILL follows. `terminated`: SIGTERM sent (a
    successful end sends it only if something is left)."""

    status: JobStatus
    reason: str
    kill_at: float
    killed: bool = False
    terminated: bool = True

    def sent(self) -> tuple[int, ...]:
        return (signal.SIGTERM,) * self.terminated + (signal.SIGKILL,) * self.killed


@dataclasses.dataclass
class Observers:
    """Who hears what of a supervised attempt, each named when the attempt is set up (job.py):
    `started(supervisor)` once the ranks run, `stopping((status, reason))` when this server
    stops the job for a reason of its own (not another server's), `ended(result)` at the end."""

    started: list[Callable[[Supervisor], None]] = dataclasses.field(default_factory=list)
    stopping: list[Callable[[tuple[JobStatus, str]], None]] = dataclasses.field(
        default_factory=list)
    ended: list[Callable[[JobResult], None]] = dataclasses.field(default_factory=list)


class Supervisor:
    def __init__(self, plan: LaunchPlan, started: Started, output: Output,
                 observers: Observers | None = None, *, timeout: float | None = None,
                 silence_timeout: float | None = None, grace: float = 3.0,
                 stop_check: Callable[[], str | None] | None = None) -> None:
        self.plan, self.output = plan, output
        self.observers = observers or Observers()
        self._started = started
        # another server's launcher asking this one to stop: () -> reason or None
        self.stop_check = stop_check
        self.timeout, self.silence_timeout, self.grace = timeout, silence_timeout, grace
        self.host = os.uname().nodename
        self.procs: list[Proc] = []
        self._stop: _Stop | None = None
        self._failures: list[Proc] = []
        self._groups_empty_at: float | None = None
        self._read_in_last_pump = 0
        self._interrupts = 0
        self._selector = selectors.DefaultSelector()  # the pidfds only
        self._pipes: dict[int, tuple[IO[bytes], Proc]] = {}  # open rank pipes, by fd
        self._job = JobProcesses(plan.env_job_id, plan.job_dir)
        self._nothing_left = False  # set once the loop saw every process of the job gone
        self._stacks: dict[str, list[str]] = {}  # name -> innermost frames, when dumped
        self._log_failure_seen = False
        self._services_stopped = False

    # -- public -------------------------------------------------------------------------
    def run(self) -> JobResult:
        started = self._started
        self.started = started.at
        self._take_sigint()
        try:
            try:
                self._watch_all()
                if started.error is not None:
                    self._begin_stop(JobStatus(started.error[0]), started.error[1])
                else:
                    for started_ in self.observers.started:
                        started_(self)
            except KeyboardInterrupt:
                self._begin_stop(JobStatus.INTERRUPTED, "interrupted while starting the ranks")
            except OSError as exc:  # a rank's log cannot be opened: the job cannot keep its logs
                self._begin_stop(JobStatus.FAILED, f"cannot open the rank logs in "
                                 f"{self.plan.job_dir}: {exc.strerror or exc}")
            self._supervise()
        finally:
            self._kill_everything()
            self.output.close()
            for proc in self.procs:
                if proc.pidfd is not None:
                    os.close(proc.pidfd)
            self._selector.close()
            started.release(wait=False)  # watch() reaps the lifeline after job.json
        result = self._result()
        for ended in self.observers.ended:
            ended(result)
        return result

    # -- taking over the started processes --------------------------------------------------
    def _watch_all(self) -> None:
        for spec, popen, at in self._started.procs:  # first: every group is stopped on any error
            self.procs.append(Proc(spec, popen, at))
            self._job.add_group(popen.pid)
        for proc in self.procs:
            self.output.open(proc.spec.name, proc.spec.log_path)
        for proc in self.procs:
            stdout = piped(proc.popen.stdout)
            enlarge_pipe(stdout.fileno())
            os.set_blocking(stdout.fileno(), False)
            self._pipes[stdout.fileno()] = (stdout, proc)  # read every pass, never polled
            proc.pidfd = pidfd(proc.popen.pid)
            if proc.pidfd is not None:  # readable when the process exits: no polling delay
                self._selector.register(proc.pidfd, selectors.EVENT_READ, proc)

    # -- the loop -----------------------------------------------------------------------
    def _supervise(self) -> None:
        while True:
            try:
                next_check, wait = 0.0, BATCH_S
                while True:
                    exited = self._pump(wait)
                    # output keeps the passes BATCH_S apart; quiet ranks let them drift to POLL_S
                    wait = BATCH_S if self._read_in_last_pump else min(wait * 2, POLL_S)
                    if self._interrupts:
                        self._interrupts = 0
                        raise KeyboardInterrupt  # handled below, at a point where no data is in flight
                    now = time.monotonic()
                    if exited or now >= next_check:  # chatty ranks must not pay waitpid per read
                        next_check = now + CHECK_S
                        self._reap()
                        self._check_deadlines()
                        if self._finished():
                            self._write_logs()
                            return
                    self.output.flush()
            except KeyboardInterrupt:
                if self._stop is None:
                    self._begin_stop(JobStatus.INTERRUPTED, "interrupted: Ctrl-C, a kernel "
                                     "interrupt or SIGTERM to the launcher")
                else:
                    self._stop.kill_at = 0.0  # second interrupt: no more grace

    def _write_logs(self) -> None:
        """What the rank logs still hold (the ranks' last lines: output.py writes the logs in
        batches) is written before the result is made: a disk that refuses it makes the job
        fail as any full log disk does, not a success with its logs cut short."""
        self.output.write_logs()
        self._check_logs()

    def _take_sigint(self) -> None:
        """Ctrl-C / kernel interrupt become a flag the loop checks, so the KeyboardInterrupt
        never lands between reading a chunk and writing it to the log. start_job counted them
        so far (main thread only: elsewhere nothing was installed)."""
        if not self._started.caught_sigint:
            return

        def on_sigint(signum: int, frame: object) -> None:
            self._interrupts += 1
        signal.signal(signal.SIGINT, on_sigint)
        self._interrupts += self._started.interrupts

    def _pump(self, wait: float) -> bool:
        """Wait up to `wait` for an exit, then read every pipe; True when a process exited."""
        exited = False
        self._read_in_last_pump = 0
        for key, _ in self._selector.select(timeout=wait):
            exited = True
            self._selector.unregister(key.fd)
            os.close(key.fd)
            key.data.pidfd = None
        for fd, (pipe, proc) in list(self._pipes.items()):
            if self._drain(fd, proc):
                proc.eof = True
                del self._pipes[fd]
                pipe.close()
        return exited

    def _drain(self, fd: int, proc: Proc) -> bool:
        """Feed what the pipe holds now, a piece at a time; True at EOF."""
        for _ in range(PIPE_SIZE // READ_SIZE):  # bounded: a rank cannot keep the loop here
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not data:
                return True
            self._read_in_last_pump += len(data)
            self.output.feed(proc.spec.name, data)
            self.output.write_pending()  # what is in flight stays one small piece
            if len(data) < READ_SIZE:  # a short read: the pipe is empty for now
                return False
        return False

    def _reap(self) -> None:
        now, stop = time.monotonic(), self._stop
        # all ends first: those seen with the root cause were before the stop it begins
        for proc in [p for p in self.procs if p.ended is None and p.popen.poll() is not None]:
            proc.ended = now
            proc.ended_while_stopping = stop is not None  # then it is no root cause
            proc.sent = stop.sent() if stop else ()  # its label: result.ended_by
            if proc.popen.returncode != 0 and not (proc.spec.role == "service"
                                                   and self._services_stopped):
                proc.failure_order = len(self._failures)
                self._failures.append(proc)
                if self._stop is None:
                    label = {"sched": "the scheduler", "service": "the rendezvous store"}.get(
                        proc.spec.role, f"rank {proc.spec.name}")
                    self._begin_stop(JobStatus.FAILED, f"{label} "
                                     f"{how_it_ended(proc.popen.returncode)}; "
                                     "stopping the other processes")
        if self._stop is None and self.procs and all(p.ended is not None for p in self.procs
                                                     if p.spec.role != "service"):
            # every process succeeded; leftovers (a daemon a rank started) get SIGTERM from
            # _finished, whose scan finds them anyway: a clean end pays for no extra scan
            self._stop = _Stop(JobStatus.SUCCEEDED, "", kill_at=now + self.grace, terminated=False)
            self._stop_services()

    def _stop_services(self) -> None:
        """Services (the torch store) serve the workers: done when they are, not a failure."""
        self._services_stopped = True
        for proc in self.procs:
            if proc.spec.role == "service" and proc.ended is None:
                signal_pids([proc.popen.pid], signal.SIGTERM)

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        self._check_logs()
        if self._stop is None:
            if self.timeout and now - self.started > self.timeout:
                self._begin_stop(JobStatus.TIMEOUT,
                                 f"the job ran longer than --timeout {self.timeout:g}s")
            elif self.silence_timeout and now - self.output.last_output > self.silence_timeout:
                self._begin_stop(JobStatus.HUNG, f"no output from any process for --silence-timeout "
                                 f"{self.silence_timeout:g}s: a hang (HCCL's own timeout is 30 min)")
            elif self.stop_check is not None:
                remote = self.stop_check()
                if remote:
                    self._begin_stop(JobStatus.FAILED, f"stopped because {remote}", remote=True)
        elif not self._stop.killed and now >= self._stop.kill_at:
            self._stop.killed = True
            self._job.signal(signal.SIGKILL, only_live_groups=False)

    def _finished(self) -> bool:
        if any(p.ended is None for p in self.procs):
            return False
        stop = self._stop
        if stop is None:  # _reap begins a stop once every process ended: none were started
            return not self.procs
        if stop.status != JobStatus.SUCCEEDED and not self.procs:
            return True  # nothing started
        live = [p for ps in self._job.live_groups().values() for p in ps]
        live = live or self._job.strays()  # the environ scan only once the groups are empty
        if live:
            if not stop.terminated:
                stop.terminated = True
                if stop.status == JobStatus.SUCCEEDED:  # the ranks ended well: say what goes
                    self.output.note(f"stopping {len(live)} process{'es' * (len(live) > 1)} "
                                     f"the ranks left behind: {described(live)} (nothing of a "
                                     f"job outlives it; grace {self.grace:g}s, then SIGKILL)")
                self._job.signal(signal.SIGTERM, only_live_groups=True)
            elif stop.killed:
                if time.monotonic() > stop.kill_at + UNKILLABLE_S:
                    self.output.note(f"processes survive SIGKILL (stuck in the kernel, state D?)"
                                     f": {sorted(live)}; giving up")
                    return True
                signal_pids(live, signal.SIGKILL)  # forked after the last SIGKILL went out
            return False
        self._nothing_left = True
        self._pump(0)  # every writer is gone: what is left in the pipes ends in EOF
        if all(p.eof for p in self.procs) or not self._pipes:
            return True
        # a process that left its group (setsid daemon) may still hold a pipe: do not wait on it
        self._groups_empty_at = self._groups_empty_at or time.monotonic()
        return time.monotonic() - self._groups_empty_at > 1.0

    def _begin_stop(self, status: JobStatus, reason: str, remote: bool = False) -> None:
        """Stop every process (a failure, a timeout, a hang, an interrupt; a successful end is no
        stop of this kind, see `_reap`): SIGTERM to the whole job now, SIGKILL after the grace
        (the loop sends it); the other servers' launchers are told, unless the stop came from
        them (`remote`)."""
        if status in DUMP_STATUSES:  # before SIGTERM: where each rank is stuck, not how it died
            live = {p.spec.name: p.popen.pid for p in self.procs
                    if p.ended is None and p.popen.poll() is None}
            if live:
                self._stacks.update(dump_live(live, self.output, self.plan.job_dir, reason))
        self._stop = _Stop(status, reason, kill_at=time.monotonic() + self.grace)
        self.output.note(f"{reason} — SIGTERM to every process now, SIGKILL after {self.grace:g}s")
        self._job.signal(signal.SIGTERM, only_live_groups=False)
        if not remote:  # the other servers' launchers stop their ranks too (link_protocol.py)
            for stopping in self.observers.stopping:
                stopping((status, reason))

    def _check_logs(self) -> None:
        """The logs are the job's record: a job that cannot keep them (a full or failing disk)
        stops, or, if every rank already ended well, is not reported as a success."""
        if not self.output.log_failure or self._log_failure_seen:
            return
        self._log_failure_seen = True
        reason = (f"the log disk is full or failing ({self.output.log_failure}); the job cannot "
                  "keep its logs. Free space there or give --log-dir on another disk")
        if self._stop is None:
            self._begin_stop(JobStatus.FAILED, reason)
        elif self._stop.status == JobStatus.SUCCEEDED:
            self._stop.status, self._stop.reason = JobStatus.FAILED, reason
            self.output.note(reason)

    def _kill_everything(self) -> None:
        """Last resort on the way out (an exception escaped the loop): nothing outlives us."""
        if self._nothing_left or not self._job.alive():
            return
        self._job.stop(grace=0)
        for p in self.procs:
            p.popen.poll()  # collect the exit codes of the ranks just killed

    # -- the result ---------------------------------------------------------------------
    def _result(self) -> JobResult:
        stop = self._stop
        status = stop.status if stop else JobStatus.SUCCEEDED
        failed = [p for p in self.procs if p.popen.returncode not in (0, None)]
        # the root cause first, then the failures before those the launcher stopped
        failures = sorted((self._failure(p) for p in failed),
                          key=lambda f: (not f.root_cause, f.stopped_by_launcher, f.name))
        root = next((f for f in failures if f.root_cause), None)
        ok = status == JobStatus.SUCCEEDED and not failures
        now = time.monotonic()
        return JobResult(
            job_id=self.plan.job_id, job_name=self.plan.job_name, job_dir=self.plan.job_dir,
            backend=self.plan.backend,
            status=status if ok or status != JobStatus.SUCCEEDED else JobStatus.FAILED,
            ok=ok, duration_s=now - self.started,
            exitcodes={p.spec.name: p.popen.returncode for p in self.procs},
            failures=failures, root_cause=root, reason=stop.reason if stop else "",
            held_back=self.output.held_back(), ended_well={} if ok else {  # the "ok" rows
                p.spec.name: [p.spec.rank_id, p.spec.device_id, p.popen.pid,
                              (p.ended or now) - p.started] for p in self.procs if p.popen.returncode == 0})

    def _failure(self, proc: Proc) -> RankFailure:
        exitcode, sig = describe_exit(proc.popen.returncode)
        try:
            last_lines = self.output.tail(proc.spec.name)
        except KeyError:  # its log could not be opened (the disk refused): nothing was read
            last_lines = []
        return RankFailure(
            name=proc.spec.name, rank_id=proc.spec.rank_id, device_id=proc.spec.device_id,
            host=self.host, pid=proc.popen.pid, exitcode=exitcode, signal_name=sig,
            runtime_s=(proc.ended or time.monotonic()) - proc.started, last_lines=last_lines,
            root_cause=proc.failure_order == 0 and not proc.ended_while_stopping,
            stopped_by_launcher=ended_by(proc.popen.returncode, proc.sent),
            after_signal=signal.Signals(proc.sent[-1]).name if proc.sent else None,
            stack=self._stacks.get(proc.spec.name, []),
            recorded=recorded_error(proc.spec.env.get(ERROR_FILE_VARIABLE)))

