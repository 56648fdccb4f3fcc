"""`launch()`: the one function behind the CLI, `%dist_run` and the notebook runner.

Reads top to bottom: the options checked -> the job (job.py: settings, this server's place, the
job link and node 0's identity, the plan, preflight, tracking, every attempt supervised) -> the
summary line -> the result (raise JobFailed when it failed).
"""
from __future__ import annotations

import dataclasses
import shlex
from typing import TYPE_CHECKING, Callable

from platform_plugin.launcher.display.notebook_display import in_kernel, ipython_publisher
from platform_plugin.launcher.job import Job, job_summary, shows_board, write_line
from platform_plugin.launcher.jobs.background import runs_in_foreground, start_background
from platform_plugin.launcher.jobs.handle import BackgroundJob
from platform_plugin.launcher.keywords import LaunchKeywords, from_kwargs
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.planning.plan import LaunchPlan
from platform_plugin.launcher.processes.result import JobFailed, JobResult
from platform_plugin.util.folders import check_cwd

if TYPE_CHECKING:  # (Unpack is in typing from 3.11; the package runs on 3.9)
    from typing_extensions import Unpack


def launch(cmd: list[str] | str,
           **options: Unpack[LaunchKeywords]) -> JobResult | BackgroundJob:
    """Run `cmd` once per rank and supervise the ranks (options: `platform-run launch --help`).

    `options` are the fields of `LaunchOptions` (launcher/options.py: names, defaults, checks);
    an unknown name or a bad value raises ConfigError before anything starts. Returns the
    JobResult; raises JobFailed (with `.result`) when a rank failed, the job timed out or hung,
    or it was interrupted — unless `check=False`. `background=True` (or `detach=True`): returns
    at once a `BackgroundJob` (`wait()`, `stop()`, `state`, `result`; docs/launch.md).
    """
    __tracebackhide__ = True  # IPython: the user's cell, not our frames, is the interesting part
    return start(cmd, from_kwargs(dict(options)))


def start(cmd: list[str] | str, options: LaunchOptions) -> JobResult | BackgroundJob:
    """`run()`, or with --background/--detach the job in a launcher process of its own: its
    handle at once, with the live board in a kernel. A notebook run by `platform-run
    debug|full` runs it in the foreground (said once) and returns the handle of the ended job."""
    __tracebackhide__ = True
    if not (options.background or options.detach):
        return run(cmd, options)
    flag = "--detach" if options.detach else "--background"
    if runs_in_foreground():
        write_line(options.write, f"[launcher] {flag}: a notebook run by platform-run debug|full "
                   "runs the job in the foreground (the run fails when a rank fails)")
        result = run(cmd, dataclasses.replace(options, background=False, detach=False))
        return BackgroundJob(result.job_id, result.job_dir, how="foreground",
                             check=options.check, result=result)
    job = start_background(cmd, options,
                           say=lambda text: write_line(options.write, text.rstrip("\n")))
    lifetime = ("it survives this kernel or terminal" if options.detach else
                "it survives a page reload and other cells; a kernel restart or shutdown stops it")
    in_cell = options.write is None and in_kernel()
    hint = reload_hint if in_cell else terminal_hint
    write_line(options.write, f"[launcher] job {job.job_id} runs in the background ({flag}): "
               f"{lifetime}; logs in {job.job_dir}" + hint(job.job_id, options.log_dir))
    if in_cell:  # the live board, from the job's folder
        job.show_board(ipython_publisher())
    return job


def reload_hint(job_id: str, log_dir: str | None) -> str:
    """What the starting cell says of a page reload: Jupyter delivers none of a running
    thread's updates to the reloaded page, so the saved board stands still; attach follows the
    job again (the line is in the saved output, above that board)."""
    where = _log_dir_option(log_dir)
    return (f"\n[launcher] after a page reload this board stops moving: `%dist_attach {job_id}"
            f"{where}` in a new cell follows the job again")


def terminal_hint(job_id: str, log_dir: str | None) -> str:
    """What a terminal or script is told: the commands that follow and stop the job."""
    where = _log_dir_option(log_dir)
    return (f"\n[launcher] `platform-run attach {job_id}{where}` follows it, "
            f"`platform-run stop {job_id}{where}` stops it")


def _log_dir_option(log_dir: str | None) -> str:
    """` --log-dir DIR` as a shell (and a magic's line, split as a shell would) reads it back."""
    return f" --log-dir {shlex.quote(log_dir)}" if log_dir else ""


def run(cmd: list[str] | str, options: LaunchOptions,
        on_job: Callable[[LaunchPlan], object] | None = None) -> JobResult:
    """`launch()` with the options already validated (the CLI and `%dist_run` call this).
    `on_job(plan)`: called once the job folder is this launcher's, before any rank starts (a
    background job's process tells its starter the job id there: launcher/jobs/child.py)."""
    __tracebackhide__ = True
    check_cwd("LAUNCH_CWD_GONE")  # (a notebook whose folder was deleted from the file browser)
    job = Job(cmd, options)
    result, hidden = job.run(on_job)
    summary = job_summary(result, hidden, board=shows_board(job.options))
    if result.job_file_error:  # a full disk: say what the record holds, it is still readable
        summary += f"\n[launcher] job.json: {result.job_file_error}"
    write_line(job.options.write, summary)
    if job.options.check and not result.ok:
        raise JobFailed(result)
    return result
