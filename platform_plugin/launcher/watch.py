"""What watches a job's ranks once they were spawned (api.py starts them): the supervisor, the
output, job.json, the other servers' notices, tracking's end, and the job's summary line.
Whatever fails before the supervisor took the ranks over stops them (`Started.abandon`).
"""
from __future__ import annotations

import os
import shlex
import sys

from platform_plugin.launcher.attempts import PeerNotice
from platform_plugin.launcher.display.chatter import hide_pattern
from platform_plugin.launcher.display.notebook_display import in_kernel, make_board
from platform_plugin.launcher.display.output import Output
from platform_plugin.launcher.options import LaunchOptions, board_metric_names
from platform_plugin.launcher.planning.plan import LaunchPlan
from platform_plugin.launcher.processes.jobfile import JobFile
from platform_plugin.launcher.processes.result import JobResult
from platform_plugin.launcher.processes.spawn import Started
from platform_plugin.launcher.processes.supervisor import Supervisor
from platform_plugin.tracking.job.report import Untracked, compare_hint
from platform_plugin.util.jobdirs import job_log_dir
from platform_plugin.variables import PLATFORM_STREAM_TO_TERMINAL


def watch(plan: LaunchPlan, options: LaunchOptions, shown, link, attempts: list[dict],
          started: Started, job_tracking, spool_dir: str | None,
          last: bool) -> tuple[JobResult, int]:
    """Supervise the started ranks to their end, then tracking's report and job.json's last
    write. Returns (result, lines hidden from the display)."""
    __tracebackhide__ = True
    try:
        if job_tracking is None:  # --tracking none: the no-op handle, made once the ranks run
            job_tracking = Untracked()
        supervisor, job_file, samplers = _set_up(plan, options, shown, link, attempts, started,
                                                 job_tracking, spool_dir)
    except BaseException:  # nothing watches the ranks yet: they must not outlive this
        started.abandon()
        raise
    result = None
    # the board (a notebook) says while the cell waits for tracking's delivery
    tell = getattr(supervisor.output, "waiting_for_tracking", lambda waiting: None)

    def waiting() -> None:
        if result is not None:
            job_file.record(result)
            tell(True)
    try:
        try:
            result = supervisor.run()
        finally:
            try:
                report = _finish_tracking(job_tracking, result, last, waiting=waiting,
                                          gone=link.gone(), launcher_bytes=_written(samplers))
            finally:
                tell(False)
        result.tracking = report
        result.attempts = list(attempts)
        result.server_id = plan.server_id
        job_file.record(result)
        result.job_file_error = job_file.error or ""
    finally:  # the supervisor released the lifeline: its `sh` exited while job.json was written
        started.reap()
    return result, supervisor.output.hidden()


def _set_up(plan: LaunchPlan, options: LaunchOptions, shown, link, attempts: list[dict],
           started: Started, job_tracking, spool_dir: str | None) -> tuple[Supervisor, JobFile, list]:
    """The output, job.json, the other servers' notices, tracking: observers of the supervisor."""
    output = _display(options, shown)
    output.note(f"job {plan.job_id}: {len(plan.workers)} rank(s) of {plan.world_size}"
                f"{''.join(' + ' + _HELPER_WORDS.get(r.name, r.name) for r in plan.ranks if r.role != 'worker')}"
                f", backend "
                f"{plan.backend} ({plan.backend_reason}); logs in {plan.job_dir}"
                + (f"; attempt {plan.attempt}" if plan.attempt > 1 else ""))
    for note in job_tracking.notes:
        output.note(note)
    job_tracking.check_store(output.note_soon)  # said within seconds, the ranks do not wait
    system_metrics = _system_metrics(spool_dir, options)
    # job.json: written when the ranks started and once at the end; a tracked job whose delivery
    # must be waited for also records the ranks' end before that wait (`waiting`)
    job_file = JobFile(plan, attempts, early_end=False)
    # the output observes the supervisor too: the board shows each process's status
    # the other servers' notices: a job of one server has nobody to tell or to hear
    peers = [PeerNotice(link, plan.server_id, plan.attempt)] if plan.nnodes > 1 else []
    supervisor = Supervisor(plan, started, output,
                            [job_file, output, *system_metrics, *peers, job_tracking],
                            timeout=options.timeout, silence_timeout=options.silence_timeout,
                            grace=options.grace,
                            stop_check=peers[0].stop_reason if peers else None)
    return supervisor, job_file, system_metrics


def _written(samplers: list) -> dict:
    """Rank label -> bytes the system-metrics sampler appended to its spool."""
    return {label: size for sampler in samplers for label, size in sampler.written.items()}


def _system_metrics(spool_dir: str | None, options: LaunchOptions) -> list:
    """The sampler of the ranks' system metrics, when there is a spool to write them to
    (psutil is not loaded for an untracked job)."""
    interval = 0 if options.no_system_metrics else options.system_metrics_interval
    if not spool_dir or interval <= 0:
        return []
    from platform_plugin.tracking.job.sysmetrics import SystemMetrics  # (a tracked job only)
    return [SystemMetrics(spool_dir, interval)]


def _display(options: LaunchOptions, shown) -> Output:
    """The live board inside a Jupyter kernel unless --show was given; prefixed lines elsewhere."""
    hide = hide_pattern(options.verbose)
    if options.show is None and options.write is None and "ipykernel" in sys.modules:
        if in_kernel():
            return make_board(max_lines_per_s=options.max_lines_per_s, hide=hide,
                              board_metrics=board_metric_names(options.board_metrics))
    return Output(shown, max_lines_per_s=options.max_lines_per_s, write=options.write, hide=hide)


_HELPER_WORDS = {"sched": "scheduler", "store": "rendezvous store"}


def _finish_tracking(job_tracking, result, last: bool = True, waiting=None, gone=(),
                     launcher_bytes=None):
    """Tracking must never turn a finished job into a crash: a failing sink becomes a note.
    `gone`: the servers of the job whose launcher vanished (the job link saw it)."""
    try:
        return job_tracking.finish(result, last=last, waiting=waiting, gone=gone,
                                   launcher_bytes=launcher_bytes)
    except KeyboardInterrupt:
        if result is None:  # the ranks' own end was interrupted: the caller reports that
            raise
        # the stop button (or Ctrl-C) while the ranks' points are delivered: the job has ended,
        # its result stands; only the wait stops (the helper runs in its own session, on)
        # the job folder, not the id: sync finds an id only in the default log folder
        plan = getattr(job_tracking, "plan", None)
        print("[launcher] stopped waiting for tracking: the forwarding helper keeps delivering "
              "in the background" + (f"; `platform-run sync {plan.job_dir}` finishes it if it "
                                     "cannot" if plan else ""), file=sys.stderr)
        return None
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        plan = getattr(job_tracking, "plan", None)
        hint = (f"; what the ranks spooled stays in {plan.job_dir}/tracking: `platform-run sync "
                f"{plan.job_dir}` delivers it (e.g. once the disk has space again)" if plan else "")
        print(f"[launcher] tracking could not finish: {exc}{hint}", file=sys.stderr)
        return None


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


def _in_kernel() -> bool:
    return "ipykernel" in sys.modules and in_kernel()


def job_summary(result: JobResult, hidden: int = 0) -> str:
    if result.ok:
        from platform_plugin.launcher.display.result_table import attempt_times
        times = f"; {attempt_times(result)}" if result.attempts else ""
        text = (f"[launcher] job {result.job_id} succeeded in {result.whole_duration_s:.1f}s "
                f"({len(result.exitcodes)} processes{times}); logs in {result.job_dir}")
        held = sum(result.held_back.values())
        if held:
            text += f"\n[launcher] {held} lines were held back from the display; all are in the logs"
        text += "".join(f"\n[launcher] {earlier['resumed']['text']}"
                        for earlier in result.attempts if earlier.get("resumed"))
    else:
        from platform_plugin.launcher.display.result_table import render_result, terminal_width
        text = render_result(result, terminal_width())  # (a failed job only)
    if hidden:
        text += (f"\n[launcher] {hidden} lines of MindSpore networking chatter are only in the "
                 "logs (--verbose shows them)")
    # a failed job's metrics matter too (what happened before the crash): say where they went
    hint = getattr(result.tracking, "ui_hint", "")
    if hint and _in_kernel():  # the cell's own way, not a command for a terminal
        hint = hint.replace(compare_hint(result.job_id), _cell_compare_hint(result))
    return text + (f"\n[launcher] tracking: {hint}" if hint else "")
