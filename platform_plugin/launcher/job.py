"""One job on this server, across its attempts (`Job`), and one attempt from its ranks' start to
its result (`Attempt`). As torch's elastic agent keeps its state on itself, each keeps what the
launch resolved (settings, this server's place, the options, the job link, the plan, what is
shown, tracking, the display) and its steps are methods reading it.

Reads top to bottom: the job link and node 0's identity -> the first plan, refused before anything
exists -> the attempts (a restart agreed through the link: same job id, resuming from node 0's
checkpoint) -> each attempt: the supervisor, the output, job.json, the other servers' notices,
tracking's end -> the whole job's result and its summary line. Whatever fails before the
supervisor took an attempt's ranks over stops them (`Started.abandon`).
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from typing import Callable

from platform_plugin import settings as settings_mod
from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks.protocol import JobHold
from platform_plugin.launcher import resume
from platform_plugin.launcher.display.chatter import hide_pattern
from platform_plugin.launcher.display.notebook_display import in_kernel, make_board
from platform_plugin.launcher.display.output import Output
from platform_plugin.launcher.display.quiet import libraries_to_log
from platform_plugin.launcher.display.result_table import (attempt_times, render_result,
                                                             terminal_width, wrapped)
from platform_plugin.launcher.display.show import check_show
from platform_plugin.launcher.options import (LaunchOptions, board_metric_names, with_environment,
                                              with_project_settings)
from platform_plugin.launcher.planning import preflight
from platform_plugin.launcher.planning.backends import default_nproc, npus_present
from platform_plugin.launcher.planning.plan import Host, LaunchPlan, build_plan, job_place
from platform_plugin.launcher.planning.rank_path import with_rank_side
from platform_plugin.launcher.processes.jobfile import JobFile
from platform_plugin.launcher.processes.result import JobResult, JobStatus
from platform_plugin.launcher.processes.spawn import (JobDirLock, Started, make_checkpoint_dir,
                                                      start_job)
from platform_plugin.launcher.processes.supervisor import Observers, Supervisor
from platform_plugin.launcher.servers import identity as identity_mod
from platform_plugin.launcher.servers.link_choice import open_link
from platform_plugin.launcher.servers.link_protocol import JobLink
from platform_plugin.tracking.job.lost_servers import report_lost
from platform_plugin.tracking.job.output_metrics import OutputMetrics, OutputReader, patterns_for
from platform_plugin.tracking.job.report import DeliveryReport, Untracked, compare_hint
from platform_plugin.tracking.job.sysmetrics import SystemMetrics
from platform_plugin.util.jobdirs import job_log_dir
from platform_plugin.util.project import launch_settings
from platform_plugin.variables import (PLATFORM_JOB_KEY, PLATFORM_STREAM_TO_TERMINAL,
                                       PLATFORM_TRACKING_SPOOL_DIR, tracking_off)

NOTE_INDENT = " " * len("[launcher] ")  # a note's next lines start under its text


class Job:
    """A job on this server: resolved once from the options (settings, this server's place in
    the job, the ranks' base environment), then run attempt after attempt (--max-restarts: after
    a failure every process stops and the whole job starts again, all servers together)."""

    def __init__(self, cmd: list[str] | str, options: LaunchOptions) -> None:
        self.cmd = cmd
        self.settings = settings_mod.resolve(options.mode, cwd=options.cwd, flags={
            "rank_table": options.rank_table, "rank_start": options.rank_start})
        self.host = Host(base_env=rank_base_env(dict(os.environ), self.settings.process_env()),
                         npu_present=npus_present())  # (base_env: a copy)
        self.options = with_environment(options, self.host.base_env)
        self.options = with_project_settings(self.options, *launch_settings(self.options.cwd,
                                                                            self.host.base_env))
        self.host.base_env.pop(PLATFORM_JOB_KEY.name, None)  # the launchers' secret, not the ranks'
        self.place = job_place(cmd, self.settings, self.options, self.host)
        self.link: JobLink = JobLink()  # the others of a multi-server job, once run() opened it
        self.plan: LaunchPlan | None = None  # the current attempt's
        self.shown: set[str] | None = None  # the ranks whose lines are shown (--show)
        self.attempts: list[dict] = []  # the failed ones' records (job.json `failed_attempts`)

    def say(self, text: str) -> None:
        """A note of the launcher's, on the caller's output."""
        self.write(f"[launcher] {text}")

    def write(self, text: str) -> None:
        write_line(self.options.write, text)

    def run(self, on_job: Callable[[LaunchPlan], object] | None = None) -> tuple[JobResult, int]:
        """Every attempt of the job. Returns (the last attempt's result, lines hidden from the
        display). `on_job(plan)`: once the job folder is this launcher's, before any rank
        starts (api.run)."""
        __tracebackhide__ = True
        # refused before meeting the others: they would be told to start, then to stop
        preflight.check_place(self.place, {**self.host.base_env, **self.options.env})
        self.link = open_link(self.place, self.options, self.say)
        try:
            # node 0 decides the job's identity, every server uses it: one plan per attempt
            identity = self.link.agree(
                identity_mod.proposed(self.place, self.options, self.host.base_env), 1)
            self.options = identity_mod.adopted(identity, self.options, self.host.base_env,
                                                self.say)
            plan = self._first_plan(identity)
            with JobHold.take(worked_in(plan), f"job {plan.job_id}"):  # no cleanup meanwhile
                with JobDirLock(plan), libraries_to_log(plan.job_dir, self.options.verbose):
                    if on_job is not None:
                        on_job(plan)
                    make_checkpoint_dir(plan.checkpoint_dir)
                    return self._attempts(plan)
        finally:
            self.link.close()

    def _first_plan(self, identity: dict[str, str]) -> LaunchPlan:
        """The first attempt's plan and what it shows, refused before anything exists. The other
        servers already agreed to start: a refusal here (what needs the plan: `--show`, the
        tracking URI, argv sizes, stale ranks) stops them too, else they would wait for this
        server's ranks in vain."""
        options = self.options
        try:
            plan = build_plan(self.cmd, self.settings, options, self.host,
                              job_id=identity["job_id"],
                              resume_step=identity_mod.resume_step(identity))
            if plan.resume_step is not None:  # a job that reuses an earlier one's checkpoints
                self.say(f"resuming from step {plan.resume_step} "
                         f"(checkpoint {identity.get(identity_mod.CHECKPOINT_KEY, '?')})")
            if options.nproc is None and plan.backend != "rank-table":
                self.say(f"--nproc not given: {default_nproc(self.host)[1]}")
            self.shown = check_show(options.show, plan)
            preflight.check_plan(plan)
            preflight.check_ports_and_devices(plan, options, self.host.npu_present, self.say)
            if options.tracking != "none":  # a bad sink, layout or MLflow URI: before the job exists
                check_tracking(options.tracking, plan)
        except ConfigError as exc:
            server = self.place.server_id
            self.link.tell_failed(server, f"its launcher refused the job "
                                          f"({exc.problems[0].code})", 1)
            self.link.conclude(1, False, server)
            raise
        self.plan = plan
        return plan

    def _attempts(self, plan: LaunchPlan) -> tuple[JobResult, int]:
        """Attempt after attempt until one succeeds, is interrupted or was the last allowed
        (each restart agreed through the job link, same job id)."""
        spool_dir = ""  # the failed attempt's spools on this server: how far it got
        started = time.monotonic()
        allowed = self.options.max_restarts + 1
        while True:
            attempt = len(self.attempts) + 1  # 1 for the first attempt, as every word and record
            if attempt > 1:  # every server reached this attempt (the first one was agreed in run())
                plan = self._restarted(plan, attempt, spool_dir)
            last = attempt >= allowed
            result, hidden = self._supervised(plan, last)
            self._whole_job(result, self.link.conclude(attempt, result.ok, plan.server_id))
            self._report_lost_servers(result)
            if result.ok or result.status == "interrupted" or last:
                if self.attempts:  # the whole job's time, restarts included (the summary: both)
                    result.job_duration_s = round(time.monotonic() - started, 3)
                return result, hidden
            self.attempts.append(attempt_record(result, attempt, allowed))
            spool_dir = result.tracking.spool_dir if result.tracking is not None else ""
            self.write(restarting(result, attempt, self.options.max_restarts))

    def _restarted(self, failed: LaunchPlan, attempt: int, spool_dir: str) -> LaunchPlan:
        """--max-restarts: the plan of attempt `attempt` (>= 2) once every server reached it,
        same job id, resuming from the checkpoint node 0 chose; the earlier attempt's logs kept
        in `attempt-N/`. The failed attempt's record gets what was resumed and what the failure
        cost (`spool_dir`: that attempt's spools on this server, "" untracked)."""
        proposed = {"job_id": failed.job_id}
        if failed.node_rank == 0:  # node 0 chooses for every server
            proposed.update(resume.proposal(failed, self.say))
        identity = self.link.agree(proposed, attempt)
        make_checkpoint_dir(failed.checkpoint_dir)  # (removed meanwhile on this server: made again)
        resumed = resume.resumed(identity, failed, spool_dir, attempt)
        self.attempts[-1]["resumed"] = resumed.to_dict()
        self.say("\n".join(wrapped(resumed.describe(), terminal_width(),
                                   NOTE_INDENT))[len(NOTE_INDENT):])
        plan = build_plan(self.cmd, self.settings, self.options, self.host, job_id=failed.job_id,
                          attempt=attempt, master_port=self._port_for(failed, attempt),
                          resume_step=resumed.step)
        keep_attempt_logs(plan.job_dir, attempt - 1)
        self.plan = plan
        return plan

    def _port_for(self, plan: LaunchPlan, attempt: int) -> int | None:
        """A restarted single-server job gets a fresh port (the old scheduler's may linger in
        TIME_WAIT); a multi-server one keeps the port every server was given."""
        if attempt > 1 and self.options.master_port is None and plan.nnodes == 1:
            return None
        return plan.master_port

    def _supervised(self, plan: LaunchPlan, last: bool) -> tuple[JobResult, int]:
        """One attempt: start the ranks, then watch them (`Attempt`). Returns (result, lines
        hidden)."""
        __tracebackhide__ = True
        tracking: Untracked | None
        if self.options.tracking == "none":  # the attempt makes the no-op one once the ranks run
            tracking, tracking_env = None, tracking_off()
        else:
            tracking = tracking_for(self.options.tracking, plan)
            # before spawning, and without the sink: every rank gets where to spool; the
            # forwarding helper (MLflow, the store, the runs) starts once the ranks run (`started`)
            tracking_env = tracking.prepare()
        # a rank on another interpreter than this one gets the rank side, unless it imports its own
        plan = with_rank_side(with_env(plan, tracking_env), self.say)
        spool_dir = PLATFORM_TRACKING_SPOOL_DIR.get(tracking_env)
        started = start_job(plan, self.options.grace)  # the ranks run from here
        return Attempt(self, plan, started, tracking, spool_dir).watch(last)

    def _whole_job(self, result: JobResult, failed_servers: list[str]) -> None:
        """A multi-server job succeeded only if every server's ranks did: this server's clean end
        becomes a failure when another server failed after it."""
        others = [s for s in failed_servers if s != self.place.server_id]
        if result.ok and others:
            result.ok, result.status = False, JobStatus.FAILED
            result.reason = f"server(s) {', '.join(others)} failed; this server's ranks succeeded"

    def _report_lost_servers(self, result: JobResult) -> None:
        """A server whose launcher vanished while it finished its own tracking, after this one
        had finished its own (so its end record did not name it), is reported on the job's
        parent run now; else nobody did and the parent stayed RUNNING."""
        gone = self.link.gone()
        spool_dir = result.tracking.spool_dir if result.tracking is not None else ""
        if gone and spool_dir:
            said = report_lost(spool_dir, gone)
            if said:
                self.say(said)


class Attempt:
    """One attempt's ranks, once spawned, to its result: the display, job.json, the other
    servers' notices and tracking, each an observer of the supervisor."""

    def __init__(self, job: Job, plan: LaunchPlan, started: Started,
                 tracking: Untracked | None, spool_dir: str | None) -> None:
        self.job, self.options, self.plan, self.started = job, job.options, plan, started
        self.tracking = tracking
        self.spool_dir = spool_dir

    def watch(self, last: bool) -> tuple[JobResult, int]:
        """Supervise the started ranks to their end, then tracking's report and job.json's last
        write (`last`: no restart follows). Returns (result, lines hidden from the display)."""
        __tracebackhide__ = True
        try:
            # --tracking none: the no-op handle, made once the ranks run
            tracking = self.tracking or Untracked()
            supervisor, job_file, samplers = self._set_up(tracking)
        except BaseException:  # nothing watches the ranks yet: they must not outlive this
            self.started.abandon()
            raise
        output = supervisor.output
        result: JobResult | None = None

        def waiting() -> None:
            if result is not None:
                job_file.record(result)
                output.waiting_for_tracking(True)  # the board (a notebook) says the cell waits
        try:
            try:
                result = supervisor.run()
            finally:
                try:
                    report = self._finish_tracking(tracking, result, last, waiting,
                                                   launcher_bytes=written(samplers))
                finally:
                    output.waiting_for_tracking(False)
            result.tracking = report
            result.attempts = list(self.job.attempts)
            result.server_id = self.plan.server_id
            job_file.record(result)
            result.job_file_error = job_file.error or ""
        finally:  # the supervisor released the lifeline: its `sh` exited while job.json was written
            self.started.reap()
        return result, output.hidden()

    def _set_up(self, tracking: Untracked) -> tuple[Supervisor, JobFile, list[SystemMetrics]]:
        """The output, job.json, the other servers' notices, tracking: observers of the
        supervisor, each named for the events it hears."""
        plan, options = self.plan, self.options
        output = self._display()
        output.metrics = self._output_metrics(output)
        output.note(f"job {plan.job_id}: {len(plan.workers)} rank(s) of {plan.world_size}"
                    f"{''.join(' + ' + HELPER_WORDS.get(r.name, r.name) for r in plan.ranks if r.role != 'worker')}"
                    f", backend {plan.backend} ({plan.backend_reason}); logs in {plan.job_dir}"
                    + "".join(f"; {note}" for note in plan.notes)
                    + (f"; attempt {plan.attempt}" if plan.attempt > 1 else ""))
        for note in tracking.notes:
            output.note(note)
        tracking.check_store(output.note_soon)  # said within seconds, the ranks do not wait
        samplers = self._system_metrics()
        # job.json: written when the ranks started and once at the end; a tracked job whose
        # delivery must be waited for also records the ranks' end before that wait (`waiting`)
        job_file = JobFile(plan, self.job.attempts, early_end=False)
        # the output observes the supervisor too: the board shows each process's status
        observers = Observers(started=[job_file.started, output.started,
                                       *(s.started for s in samplers), tracking.started],
                              ended=[job_file.ended, output.ended, *(s.ended for s in samplers)])
        stop_check = None
        if plan.nnodes > 1:  # the other servers' notices: a job of one server has nobody to tell
            peers = PeerNotice(self.job.link, plan.server_id, plan.attempt)
            observers.stopping.append(peers.stopping)
            stop_check = peers.stop_reason
        supervisor = Supervisor(plan, self.started, output, observers, timeout=options.timeout,
                                silence_timeout=options.silence_timeout, grace=options.grace,
                                stop_check=stop_check)
        return supervisor, job_file, samplers

    def _system_metrics(self) -> list[SystemMetrics]:
        """The sampler of the ranks' system metrics, when there is a spool to write them to
        (psutil is loaded by its thread, once the ranks run)."""
        options = self.options
        interval = 0 if options.no_system_metrics else options.system_metrics_interval
        if not self.spool_dir or interval <= 0:
            return []
        return [SystemMetrics(self.spool_dir, interval)]

    def _output_metrics(self, output: Output) -> OutputReader | None:
        """What reads the ranks' lines for metrics into their spools (a tracked job only): the
        built-ins in this process, a user's pattern in a parser process of its own (a
        backtracking pattern must never hold up the output)."""
        if not self.spool_dir:
            return None
        option = self.options.metrics_from_output
        patterns = patterns_for(option)
        labels = {rank.name: str(rank.rank_id) for rank in self.plan.workers
                  if rank.rank_id is not None}
        if not patterns or not labels:
            return None
        if option is None:
            return OutputMetrics(self.spool_dir, patterns, labels)
        # a launch with a pattern of the user's only: the parser process's launcher side
        from platform_plugin.tracking.job.parse_process import ParseProcess
        try:
            return ParseProcess(self.spool_dir, option, labels)
        except OSError as exc:
            output.note(f"--metrics-from-output: no metrics read from the lines: its parser "
                        f"could not start ({exc.strerror or exc})")
            return None

    def _display(self) -> Output:
        """The live board inside a Jupyter kernel unless --show was given; prefixed lines
        elsewhere."""
        options = self.options
        hide = hide_pattern(options.verbose)
        if shows_board(options):
            return make_board(max_lines_per_s=options.max_lines_per_s, hide=hide,
                              board_metrics=board_metric_names(options.board_metrics))
        return Output(self.job.shown, max_lines_per_s=options.max_lines_per_s,
                      write=options.write, hide=hide)

    def _finish_tracking(self, tracking: Untracked, result: JobResult | None, last: bool,
                         waiting: Callable[[], None],
                         launcher_bytes: dict[str, int]) -> DeliveryReport | None:
        """Tracking must never turn a finished job into a crash: a failing sink becomes a note.
        The servers of the job whose launcher vanished (the job link saw it) are told to it."""
        tracked = self.tracking is not None  # (the job folder: sync finds an id only in the
        job_dir = self.plan.job_dir          # default log folder)
        try:
            return tracking.finish(result, last=last, waiting=waiting, gone=self.job.link.gone(),
                                   launcher_bytes=launcher_bytes)
        except KeyboardInterrupt:
            if result is None:  # the ranks' own end was interrupted: the caller reports that
                raise
            # the stop button (or Ctrl-C) while the ranks' points are delivered: the job has
            # ended, its result stands; only the wait stops (the helper runs in its own session)
            print("[launcher] stopped waiting for tracking: the forwarding helper keeps "
                  "delivering in the background" + (f"; `platform-run sync {job_dir}` finishes "
                                                    "it if it cannot" if tracked else ""),
                  file=sys.stderr)
            return None
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            hint = (f"; what the ranks spooled stays in {job_dir}/tracking: `platform-run sync "
                    f"{job_dir}` delivers it (e.g. once the disk has space again)"
                    if tracked else "")
            print(f"[launcher] tracking could not finish: {exc}{hint}", file=sys.stderr)
            return None


class PeerNotice:
    """The other servers' word on an attempt: when this server's job stops for a reason of its
    own (a rank failed, a timeout, Ctrl-C) the other servers hear it through the job link
    (`stopping`, a supervisor observer), and this server hears theirs (`stop_reason`, the
    supervisor's stop check)."""

    def __init__(self, link: JobLink, server_id: str, attempt: int) -> None:
        self.link, self.server_id, self.attempt = link, server_id, attempt

    def stopping(self, payload: tuple[JobStatus, str]) -> None:
        status, reason = payload
        self.link.tell_failed(self.server_id, reason, self.attempt)

    def stop_reason(self) -> str | None:
        return self.link.stop_reason(self.attempt)


HELPER_WORDS = {"sched": "scheduler", "store": "rendezvous store"}


def check_tracking(choice: str, plan: LaunchPlan) -> None:
    """A bad sink, layout or MLflow URI, refused before the job exists. The launcher's side of
    tracking (the sink's choice, the URI checks, the spool folder, the helper's start) is loaded
    for a tracked job only: `--tracking none` needs none of it."""
    from platform_plugin.tracking.job.handle import JobTracking
    JobTracking.check(choice, plan)


def tracking_for(choice: str, plan: LaunchPlan) -> Untracked:
    """A tracked job's handle (loaded for a tracked job only, as in check_tracking)."""
    from platform_plugin.tracking.job.handle import JobTracking
    return JobTracking.create(choice, plan)


def worked_in(plan: LaunchPlan) -> list[str]:
    """The folders a job writes in: its ranks' working folders (kernel_meta, checkpoints), its
    job folder, compile cache and checkpoint folder (not made yet: the folders above them are
    held)."""
    return sorted({spec.cwd for spec in plan.ranks}
                  | {plan.job_dir, plan.cache_dir, plan.checkpoint_dir} - {""})


def written(samplers: list[SystemMetrics]) -> dict[str, int]:
    """Rank label -> bytes the system-metrics sampler appended to its spool."""
    return {label: size for sampler in samplers for label, size in sampler.written.items()}


def attempt_record(result: JobResult, attempt: int, attempts_allowed: int) -> dict:
    """What job.json and the final error keep of a failed attempt (`attempt` of
    `attempts_allowed`): its root-cause table, headed by the attempt (the job went on)."""
    cause = result.root_cause
    return {"attempt": attempt, "status": result.status, "reason": result.reason,
            "duration_s": round(result.duration_s, 3),
            "root_cause": None if cause is None else {
                "name": cause.name, "rank_id": cause.rank_id, "device_id": cause.device_id,
                "host": cause.host, "how": cause.how, "last_lines": cause.last_lines},
            "table": render_result(result, attempt=(attempt, attempts_allowed))}


def keep_attempt_logs(job_dir: str, attempt: int) -> None:
    """Before a restart: move the logs of attempt N (1, 2, ...) into `attempt-N/`, so
    `rank_K.log` is always the current attempt's and every earlier one is kept."""
    target = os.path.join(job_dir, f"attempt-{attempt}")
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(job_dir):
        if name.endswith(".log"):
            os.replace(os.path.join(job_dir, name), os.path.join(target, name))


def restarting(result: JobResult, attempt: int, max_restarts: int) -> str:
    """The failed attempt's table, headed by the attempt (not "job ... FAILED": the job goes
    on), and what happens next."""
    return (render_result(result, terminal_width(), attempt=(attempt, max_restarts + 1))
            + f"\n[launcher] restarting the whole job as attempt {attempt + 1} of "
            f"{max_restarts + 1} (--max-restarts)")


def _cell_compare_hint(result: JobResult) -> str:
    """`%dist_compare` of the job: its id when it is in the default log folder (where the magic
    looks), else its folder (a --log-dir of the cell). A kernel of `platform-run debug|full`
    writes the same line into the notebook and onto the terminal: then both ways, each named."""
    cell = (compare_hint(result.job_id, notebook=True)
            if os.path.dirname(result.job_dir) == job_log_dir()
            else compare_hint(shlex.quote(result.job_dir), notebook=True))
    if PLATFORM_STREAM_TO_TERMINAL.get() == "1":
        return (f"{cell} in the notebook, "
                f"`{compare_hint(shlex.quote(result.job_dir))}` in a terminal")
    return cell


def shows_board(options: LaunchOptions) -> bool:
    """The live board (inside a Jupyter kernel, unless --show or `write=` was given)."""
    return (options.show is None and options.write is None and "ipykernel" in sys.modules
            and in_kernel())


def job_summary(result: JobResult, hidden: int = 0, board: bool = False) -> str:
    """What the launcher says at the end. `board`: the board above turned into the result (each
    process's end and note in its row): a failure adds its headline and root cause, not the
    process table again."""
    if result.ok:
        times = f"; {attempt_times(result)}" if result.attempts else ""
        text = (f"[launcher] job {result.job_id} succeeded in {result.whole_duration_s:.1f}s "
                f"({len(result.exitcodes)} processes{times}); logs in {result.job_dir}")
        held = sum(result.held_back.values())
        if held:
            text += f"\n[launcher] {held} lines were held back from the display; all are in the logs"
        text += "".join(f"\n[launcher] {earlier['resumed']['text']}"
                        for earlier in result.attempts if earlier.get("resumed"))
    else:
        text = render_result(result, terminal_width(), rows=not board)
    if hidden:
        text += (f"\n[launcher] {hidden} lines of MindSpore networking chatter are only in the "
                 "logs (--verbose shows them)")
    # a failed job's metrics matter too (what happened before the crash): say where they went
    hint = result.tracking.ui_hint if result.tracking is not None else ""
    if hint and "ipykernel" in sys.modules and in_kernel():  # the cell's way, not a command
        hint = hint.replace(compare_hint(result.job_id), _cell_compare_hint(result))
    return text + (f"\n[launcher] tracking: {hint}" if hint else "")


# ipykernel sets these to "1" in every kernel (zmqshell.init_environment) so that a cell's own
# subprocesses colour the cell. A rank writes into a pipe to its log file, read with less and
# grep: colour codes forced there are noise (`^[[33m`), so ranks started from a kernel do not
# inherit them. `launch(env={"FORCE_COLOR": "1"})` or the .env file still give them on purpose.
KERNEL_COLOUR_FORCING = ("FORCE_COLOR", "CLICOLOR_FORCE")


def rank_base_env(env: dict[str, str], configured: dict[str, str]) -> dict[str, str]:
    """Drop what only makes sense inside the kernel: ranks are plain processes, an inline
    matplotlib backend there fails on the first plot, and the kernel's colour forcing would
    write escape codes into the rank logs. `configured` (.env, the platform's files) wins."""
    if env.get("MPLBACKEND", "").startswith("module://matplotlib_inline"):
        del env["MPLBACKEND"]
    if "ipykernel" in sys.modules:  # (a kernel's process; a CLI launch never imports it)
        for name in KERNEL_COLOUR_FORCING:
            if env.get(name) == "1":
                del env[name]
    env.update(configured)
    return env


def with_env(plan: LaunchPlan, extra: dict[str, str] | None) -> LaunchPlan:
    if not extra:
        return plan
    ranks = tuple(dataclasses.replace(r, env={**r.env, **extra}) for r in plan.ranks)
    return dataclasses.replace(plan, ranks=ranks)


def write_line(write: Callable[[str], object] | None, text: str) -> None:
    """A line on the caller's `write=` (a notebook run's, a test's), else on stdout."""
    if write is not None:
        write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
