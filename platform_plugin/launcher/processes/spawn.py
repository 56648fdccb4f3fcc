"""Process plumbing: spawn a rank in its own session, and a lifeline.

How a job's processes die with the supervisor: the lifeline, a tiny `sh` watchdog in its own
session, reads the process-group ids of the ranks from a pipe whose write end only the
supervisor holds. When the supervisor dies (even by SIGKILL) the pipe reaches EOF and the
watchdog runs reaper.py, which stops the groups and every process that carries the job's JOB_ID
(setsid grandchildren too, and a rank spawned just before the death, before its group was
registered): SIGTERM, SIGKILL after the grace. On a normal end the supervisor writes `done` and
the watchdog exits without killing anything. The waiting is done by `sh` (cheap to start,
paid by every job); Python starts only in the rare case that needs it, the supervisor's death.
The same watchdog ties a server to the process that started it (`Lifeline.for_groups`: the
MLflow UI of `%dist_compare` and `platform-run ui`, see comparison/jupyter_ui.py).

`start_job(plan, grace)` starts a job's processes and nothing else: the supervisor takes them
over once it returned (job.Attempt), while the ranks' interpreters start.

Ranks are spawned without a `preexec_fn` on purpose: any preexec_fn forces CPython into
fork + wait-for-exec, whose cost grows with the parent's memory (a notebook kernel with MindSpore
or MLflow imported is hundreds of MiB), while `start_new_session` alone keeps the vfork/
posix_spawn fast path. The lifeline, not a PR_SET_PDEATHSIG, stops the ranks when the launcher
dies (bench/launch.py measures the difference).
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import IO, Any

from platform_plugin.errors import ConfigError, PlatformPluginError
from platform_plugin.launcher.planning.plan import LaunchPlan, RankSpec
from platform_plugin.launcher.processes.reaper import JobProcesses
from platform_plugin.folder_locks.protocol import read_holder, write_holder
from platform_plugin.util.folders import check_own_folder
from platform_plugin.variables import PLATFORM_JOB_DIR

# Reads "<pgid>" lines; "done" = clean end. On EOF (supervisor gone) runs the reaper command
# given as arguments, with the groups appended; if that cannot run, it still KILLs the groups.
# Signals are ignored (and stay ignored in the reaper) so the stop that killed the supervisor
# does not take its clean-up down with it.
_WATCHDOG_SH = r"""
trap '' INT TERM HUP
groups=""
while IFS= read -r line; do
  [ "$line" = done ] && exit 0
  groups="$groups $line"
done
"$@" $groups || for g in $groups; do kill -9 "-$g" 2>/dev/null; done
exit 0
"""
_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
# an enclosing job (a launcher started by a rank) sweeps by these: its sweep must not end this
# job's lifeline before the lifeline has stopped this job
_ENCLOSING_JOB_VARIABLES = ("JOB_ID", PLATFORM_JOB_DIR.name)
PIPE_SIZE = 1 << 20  # a rank's pipe: what it may write between two reads of the supervisor


def spawn(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen:
    """Start one rank: own session/process group, stdout+stderr merged into one pipe."""
    return subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, bufsize=0,
    )


@dataclasses.dataclass(eq=False)
class Started:
    """A job's processes just after they were spawned, before anything watches them: the
    supervisor takes them over (`Supervisor(plan, started, ...)`). `procs`: (spec, popen, start
    time) per process started; `error`: (status, reason) when starting stopped early (the
    program does not exist, an interrupt); `interrupts`: Ctrl-Cs received meanwhile (counted,
    never raised: the supervisor's loop acts on them), if `caught_sigint` (main thread only);
    `previous_sigint`: the handler to put back at the end; `at`: when starting began."""

    lifeline: Lifeline
    procs: list[tuple[RankSpec, subprocess.Popen, float]] = dataclasses.field(default_factory=list)
    error: tuple[str, str] | None = None
    interrupts: int = 0
    caught_sigint: bool = False
    previous_sigint: Any = None
    at: float = dataclasses.field(default_factory=time.monotonic)

    def abandon(self) -> None:
        """Setting up the watch failed after the spawn (an interrupt, an import error): stop
        every process of the job at once, then end the lifeline cleanly."""
        job = JobProcesses(self.lifeline.job_id, self.lifeline.job_dir,
                           {popen.pid for _, popen, _ in self.procs})
        job.stop(grace=0)
        for _, popen, _ in self.procs:
            popen.poll()
        self.release()

    def release(self, wait: bool = True) -> None:
        """The end of every job, watched or abandoned: the rank pipes still open (held by a
        process that left the job's groups, or never read), the lifeline, the SIGINT handler.
        `wait=False`: the lifeline's exit is collected later, by `reap()`."""
        for _, popen, _ in self.procs:
            if popen.stdout is not None:
                popen.stdout.close()
        self.lifeline.release(wait=wait)
        if self.caught_sigint:
            signal.signal(signal.SIGINT, self.previous_sigint)

    def reap(self) -> None:
        self.lifeline.reap()


class JobDirLock:
    """`with JobDirLock(plan):` this launcher owns the job folder on its server for the whole
    job (every attempt, tracking's drain): an exclusive flock on `.launcher-<server>.lock` in
    it, released by the kernel even when the launcher is SIGKILLed. A second launch with the
    same job id into the same log folder is refused (LAUNCH_JOB_RUNNING, before any rank
    starts): its ranks would overwrite this job's logs and spool, and its end-of-job sweep (by
    job folder, reaper.py) would stop this job's ranks. The servers of one multi-server job
    share the folder: each holds its own lock."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan, self.fd = plan, -1

    def __enter__(self) -> JobDirLock:
        plan = self.plan
        make_job_dir(plan.job_dir)
        # again, now that it exists: preflight checked it before, and a folder another user
        # made under this job id in between would be adopted (makedirs accepts an existing one)
        check_own_folder(plan.job_dir, "job", "LAUNCH_JOB_DIR_NOT_OWN", "--job-id",
                         link_allowed=False)
        path = os.path.join(plan.job_dir, f".launcher-{plan.server_id}.lock")
        try:  # never through a symlink (its target would be cut to our pid), never blocking
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW |
                              os.O_NONBLOCK, 0o644)  # (on a FIFO)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink
                self._refuse_planted(path, "a symlink")
            return self  # cannot coordinate (another user's folder): what fails next says why
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            self.__exit__()
            self._refuse_planted(path, "not a regular file")
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(self.fd)[:32] or "?"
            self.__exit__()
            raise ConfigError(f"job {plan.job_id} is already running in {plan.job_dir} "
                              f"(launcher pid {holder}): a second launch of it there would "
                              "overwrite its logs and tracking spool and stop its ranks when it "
                              "ends. Wait for it to end, or give another --job-id",
                              code="LAUNCH_JOB_RUNNING") from None
        except BaseException:
            self.__exit__()
            raise
        write_holder(self.fd, str(os.getpid()))  # only for a second launch's refusal
        return self

    def _refuse_planted(self, path: str, what: str) -> None:
        raise ConfigError(f"{path} is {what}, not the launcher's lock file: remove it (while it "
                          f"is there a second launch of job {self.plan.job_id} could not be "
                          "refused)", code="LAUNCH_JOB_LOCK")

    def __exit__(self, *exc_info: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def make_job_dir(job_dir: str) -> None:
    try:
        os.makedirs(job_dir, exist_ok=True)
    except OSError as exc:  # checked writable just before; a disk can fill in between
        raise PlatformPluginError(f"cannot create the job folder {job_dir}: "
                                  f"{exc.strerror or exc}") from None


def make_checkpoint_dir(folder: str) -> None:
    """The job's checkpoint folder, made before its first attempt and never emptied between
    attempts: what a restarted attempt resumes from."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:  # checked writable before; a disk can fill, a mount can go
        raise PlatformPluginError(f"cannot create the checkpoint folder {folder}: "
                                  f"{exc.strerror or exc}") from None


def start_job(plan: LaunchPlan, grace: float) -> Started:
    """Create the job folder and the lifeline, then spawn every process of the plan, each
    registered with the lifeline before the next starts (a launcher killed meanwhile leaves no
    orphan). Ctrl-C is counted from here on (see Started)."""
    make_job_dir(plan.job_dir)  # made under JobDirLock already, unless called on its own
    started = Started(Lifeline(plan.env_job_id, plan.job_dir, grace))
    if threading.current_thread() is threading.main_thread():
        def count(signum: int, frame: object) -> None:
            started.interrupts += 1
        started.previous_sigint = signal.signal(signal.SIGINT, count)
        started.caught_sigint = True
    try:
        for spec in plan.ranks:
            if spec.fresh_cwd:
                try:
                    fresh_folder(spec.cwd)
                except OSError as exc:  # nothing started yet: the job fails, saying why
                    started.error = ("failed", f"could not make the rank folder {spec.cwd} "
                                     f"anew: {exc.strerror or exc}")
                    return started
        for spec in plan.ranks:
            popen = spawn(list(spec.argv), spec.env, spec.cwd)
            started.procs.append((spec, popen, time.monotonic()))
            started.lifeline.add(popen.pid)  # pid == pgid: start_new_session made it a leader
    except KeyboardInterrupt:
        started.error = ("interrupted", "interrupted while starting the ranks")
    except OSError as exc:  # e.g. the program does not exist: nothing useful can run
        started.error = ("failed", f"could not start {plan.command[0]}: {exc}")
    except BaseException:  # anything else: what was started must not outlive the error
        started.abandon()
        raise
    return started


def fresh_folder(path: str) -> None:
    """--rank-dir: the rank's folder removed and made anew, as the shell loop's `rm -rf
    device_$i; mkdir device_$i` (a symlink there is removed, never what it points to)."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)


def piped(stream: IO[bytes] | None) -> IO[bytes]:
    """A Popen stream asked for with PIPE, which Popen always creates (typed Optional because
    other arguments leave it None)."""
    if stream is None:  # pragma: no cover - only if the caller did not ask for a pipe
        raise RuntimeError("the process was started without the pipe asked for")
    return stream


def pidfd(pid: int) -> int | None:
    """A descriptor that is readable once the process exited (None: exits are polled)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel or Python
        return None


def enlarge_pipe(fd: int) -> None:
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
    except OSError:
        pass  # a smaller pipe only costs speed


class Lifeline:
    """The watchdog described above for the job `job_id` (logs in `job_dir`). `add(pgid)`
    registers a group; `release()` ends it cleanly. `Lifeline.for_groups(grace)`: groups only,
    no job environment to sweep (a server this process started, in its own session);
    `Lifeline.for_tag(variable, value, grace)`: the processes carrying that variable."""

    @classmethod
    def for_groups(cls, grace: float) -> Lifeline:
        return cls("", "", grace)  # no JOB_ID / job folder: the reaper sweeps only the groups

    @classmethod
    def for_tag(cls, variable: str, value: str, grace: float) -> Lifeline:
        """Every process carrying `variable=value` (a notebook run's kernel and what it left)."""
        return cls("", "", grace, tag=f"{variable}={value}")

    def __init__(self, job_id: str, job_dir: str, grace: float, tag: str = "") -> None:
        self.job_id, self.job_dir = job_id, job_dir
        reaper = [sys.executable or "python3", "-S", "-I", _REAPER, f"{grace:g}", job_id, job_dir,
                  *([tag] if tag else [])]
        env = {k: v for k, v in os.environ.items() if k not in _ENCLOSING_JOB_VARIABLES}
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHDOG_SH, "platform-lifeline", *reaper], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            close_fds=True, env=env)
        self._stdin = piped(self._proc.stdin)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def add(self, pgid: int) -> None:
        self._write(f"{pgid}\n")

    def release(self, wait: bool = True) -> None:
        """End the watchdog cleanly ("done": it stops nothing). `wait=False`: its exit is
        collected by `reap()` later - a job's end does its last writes meanwhile instead of
        waiting for `sh` to be scheduled (on a busy machine up to a millisecond or more)."""
        if self._stdin.closed:
            return
        self._write("done\n")
        try:
            self._stdin.close()
        except OSError:
            pass
        if wait:
            self.reap()

    def reap(self) -> None:
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - sh reads one line at a time
            self._proc.kill()
            self._proc.wait()

    def _write(self, text: str) -> None:
        try:
            self._stdin.write(text.encode())
            self._stdin.flush()
        except (BrokenPipeError, OSError):
            pass
