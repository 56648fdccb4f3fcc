"""`launch()`: the one function behind the CLI, `%dist_run` and the notebook runner.

Reads top to bottom: settings -> this server's place in the job -> the job link and the job's
identity (node 0's) -> plan -> preflight (ports, stale ranks) -> tracking -> supervise ->
tracking report -> job.json -> result (raise JobFailed when it failed).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import TYPE_CHECKING

from platform_plugin import settings as settings_mod
from platform_plugin.errors import ConfigError
from platform_plugin.launcher.attempts import attempt_record, restarted, restarting
from platform_plugin.launcher.display.quiet import libraries_to_log
from platform_plugin.launcher.display.show import check_show
from platform_plugin.launcher.keywords import LaunchKeywords, from_kwargs
from platform_plugin.launcher.options import LaunchOptions, with_environment
from platform_plugin.launcher.planning import preflight
from platform_plugin.launcher.planning.backends import default_nproc, npus_present
from platform_plugin.launcher.planning.plan import Host, LaunchPlan, build_plan, job_place
from platform_plugin.launcher.planning.rank_path import with_rank_side
from platform_plugin.launcher.processes.result import JobFailed, JobResult, JobStatus
from platform_plugin.launcher.processes.spawn import JobDirLock, make_checkpoint_dir, start_job
from platform_plugin.launcher.servers import identity as identity_mod
from platform_plugin.launcher.servers.link_choice import open_link
from platform_plugin.launcher.watch import job_summary, watch
from platform_plugin.folder_locks.protocol import JobHold
from platform_plugin.util.folders import check_cwd
from platform_plugin.variables import PLATFORM_JOB_KEY, PLATFORM_TRACKING_SPOOL_DIR, tracking_off

if TYPE_CHECKING:  # (Unpack is in typing from 3.11; the package runs on 3.9)
    from typing_extensions import Unpack

    from platform_plugin.tracking.job.handle import JobTracking


def launch(cmd: list[str] | str, **options: Unpack[LaunchKeywords]) -> JobResult:
    """Run `cmd` once per rank and supervise the ranks (options: `platform-run launch --help`).

    `options` are the fields of `LaunchOptions` (launcher/options.py: names, defaults, checks);
    an unknown name or a bad value raises ConfigError before anything starts. Returns the
    JobResult; raises JobFailed (with `.result`) when a rank failed, the job timed out or hung,
    or it was interrupted — unless `check=False`.
    """
    __tracebackhide__ = True  # IPython: the user's cell, not our frames, is the interesting part
    return run(cmd, from_kwargs(dict(options)))


def run(cmd: list[str] | str, options: LaunchOptions) -> JobResult:
    """`launch()` with the options already validated (the CLI and `%dist_run` call this)."""
    __tracebackhide__ = True
    check_cwd("LAUNCH_CWD_GONE")  # (a notebook whose folder was deleted from the file browser)
    settings = settings_mod.resolve(options.mode, flags={"rank_table": options.rank_table,
                                                         "rank_start": options.rank_start},
                                    cwd=options.cwd)
    host = Host(base_env=_rank_base_env(dict(os.environ), settings.process_env()),  # a copy
                npu_present=npus_present())
    options = with_environment(options, host.base_env)
    host.base_env.pop(PLATFORM_JOB_KEY.name, None)  # the launchers' secret, not the ranks'
    place = job_place(cmd, settings, options, host)
    # refused before meeting the others: they would be told to start, then to stop
    preflight.check_place(place, {**host.base_env, **options.env})
    link = open_link(place, options, _note(options.write))  # the others of a multi-server job
    try:
        # node 0 decides the job's identity, every server uses it: one plan per attempt
        identity = link.agree(identity_mod.proposed(place, options, host.base_env), 1)
        options = identity_mod.adopted(identity, options, host.base_env, _note(options.write))
        plan, shown = _checked_plan(cmd, settings, host, options, identity, link,
                                    place.server_id)
        with JobHold.take(_worked_in(plan), f"job {plan.job_id}"):  # no cleanup meanwhile
            with JobDirLock(plan), libraries_to_log(plan.job_dir, options.verbose):
                make_checkpoint_dir(plan.checkpoint_dir)
                result, hidden = _run_attempts(cmd, settings, host, options, plan, shown, link)
    finally:
        link.close()
    summary = job_summary(result, hidden)
    if result.job_file_error:  # a full disk: say what the record holds, it is still readable
        summary += f"\n[launcher] job.json: {result.job_file_error}"
    _print(options.write, summary)
    if options.check and not result.ok:
        raise JobFailed(result)
    return result


def _checked_plan(cmd, settings, host: Host, options: LaunchOptions, identity: dict, link,
                  server_id: str) -> tuple[LaunchPlan, object]:
    """The first attempt's plan and what it shows, refused before anything exists. The other
    servers already agreed to start: a refusal here (what needs the plan: `--show`, the
    tracking URI, argv sizes, stale ranks) stops them too, else they would wait for this
    server's ranks in vain."""
    try:
        plan = build_plan(cmd, settings, options, host, job_id=identity["job_id"],
                          resume_step=identity_mod.resume_step(identity))
        if plan.resume_step is not None:  # a job that reuses an earlier one's checkpoints
            _print(options.write, f"[launcher] resuming from step {plan.resume_step} "
                   f"(checkpoint {identity.get(identity_mod.CHECKPOINT_KEY, '?')})")
        if options.nproc is None and plan.backend != "rank-table":
            _print(options.write, f"[launcher] --nproc not given: {default_nproc(host)[1]}")
        shown = check_show(options.show, plan)
        preflight.check_plan(plan)
        preflight.check_ports_and_devices(plan, options, host.npu_present, _note(options.write))
        if options.tracking != "none":  # a bad sink, layout or MLflow URI: before the job exists
            tracked_side().check(options.tracking, plan)
    except ConfigError as exc:
        link.tell_failed(server_id, f"its launcher refused the job ({exc.problems[0].code})", 1)
        link.conclude(1, False, server_id)
        raise
    return plan, shown


def _run_attempts(cmd, settings, host: Host, options: LaunchOptions, plan: LaunchPlan, shown,
                  link) -> tuple[JobResult, int]:
    """--max-restarts N: after a failure every process stops, then the whole job starts again
    (all servers together: each attempt is agreed through the job link), same job id.
    Returns (the last attempt's result, lines hidden from the display)."""
    attempts: list[dict] = []
    started = time.monotonic()
    spool_dir = ""  # the failed attempt's spools on this server: how far it got
    while True:
        attempt = len(attempts) + 1  # 1 for the first attempt, as every word and record counts
        if attempt > 1:  # every server reached this attempt (the first one was agreed in run())
            plan = restarted(cmd, settings, host, options, plan, link, attempt, attempts[-1],
                             spool_dir, _note(options.write))
        result, hidden = _supervise(plan, options, shown, link, attempts,
                                    last=attempt > options.max_restarts)
        _whole_job(result, link.conclude(attempt, result.ok, plan.server_id), plan.server_id)
        _report_lost_servers(result, link, options.write)
        if result.ok or result.status == "interrupted" or attempt > options.max_restarts:
            if attempts:  # the whole job's time, restarts included (the summary gives both)
                result.job_duration_s = round(time.monotonic() - started, 3)
            return result, hidden
        attempts.append(attempt_record(result, attempt, options.max_restarts + 1))
        spool_dir = getattr(result.tracking, "spool_dir", "") or ""
        _print(options.write, restarting(result, attempt, options.max_restarts))


def _worked_in(plan: LaunchPlan) -> list[str]:
    """The folders a job writes in: its ranks' working folders (kernel_meta, checkpoints), its
    job folder, compile cache and checkpoint folder (not made yet: the folders above them are
    held)."""
    return sorted({spec.cwd for spec in plan.ranks}
                  | {plan.job_dir, plan.cache_dir, plan.checkpoint_dir} - {""})


def _whole_job(result: JobResult, failed_servers: list[str], server_id: str) -> None:
    """A multi-server job succeeded only if every server's ranks did: this server's clean end
    becomes a failure when another server failed after it."""
    others = [s for s in failed_servers if s != server_id]
    if result.ok and others:
        result.ok, result.status = False, JobStatus.FAILED
        result.reason = f"server(s) {', '.join(others)} failed; this server's ranks succeeded"


def tracked_side() -> type[JobTracking]:
    """The launcher's side of tracking (the sink's choice, the URI checks, the spool folder, the
    helper's start) is loaded for a tracked job only: `--tracking none` needs none of it."""
    from platform_plugin.tracking.job.handle import JobTracking
    return JobTracking


def _report_lost_servers(result: JobResult, link, write) -> None:
    """A server whose launcher vanished while it finished its own tracking, after this one had
    finished its own (so its end record did not name it), is reported on the job's parent run
    now; else nobody did and the parent stayed RUNNING."""
    gone = link.gone()
    spool_dir = getattr(result.tracking, "spool_dir", "")
    if gone and spool_dir:
        from platform_plugin.tracking.job.lost_servers import report_lost  # (a rare end)
        said = report_lost(spool_dir, gone)
        if said:
            _print(write, f"[launcher] {said}")


def _supervise(plan: LaunchPlan, options: LaunchOptions, shown, link, attempts: list[dict],
               last: bool) -> tuple[JobResult, int]:
    """One attempt: start the ranks, then watch them (watch.py). Returns (result, lines hidden)."""
    __tracebackhide__ = True
    if options.tracking == "none":  # watch() makes the no-op JobTracking once the ranks run
        job_tracking, tracking_env = None, tracking_off()
    else:
        job_tracking = tracked_side().create(options.tracking, plan)
        # before spawning, and without the sink: every rank gets where to spool; the forwarding
        # helper (MLflow, the store, the runs) starts once the ranks run (`started`)
        tracking_env = job_tracking.prepare()
    # a rank on another interpreter than this one gets the rank side, unless it imports its own
    plan = with_rank_side(_with_env(plan, tracking_env), _note(options.write))
    spool_dir = PLATFORM_TRACKING_SPOOL_DIR.get(tracking_env)
    started = start_job(plan, options.grace)  # the ranks run from here
    return watch(plan, options, shown, link, attempts, started, job_tracking, spool_dir, last)


def _note(write):
    def note(text: str) -> None:
        _print(write, f"[launcher] {text}")
    return note


# ipykernel sets these to "1" in every kernel (zmqshell.init_environment) so that a cell's own
# subprocesses colour the cell. A rank writes into a pipe to its log file, read with less and
# grep: colour codes forced there are noise (`^[[33m`), so ranks started from a kernel do not
# inherit them. `launch(env={"FORCE_COLOR": "1"})` or the .env file still give them on purpose.
KERNEL_COLOUR_FORCING = ("FORCE_COLOR", "CLICOLOR_FORCE")


def _rank_base_env(env: dict, configured: dict) -> dict:
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


def _with_env(plan: LaunchPlan, extra: dict | None) -> LaunchPlan:
    if not extra:
        return plan
    ranks = tuple(dataclasses.replace(r, env={**r.env, **extra}) for r in plan.ranks)
    return dataclasses.replace(plan, ranks=ranks)


def _print(write, text: str) -> None:
    if write is not None:
        write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
