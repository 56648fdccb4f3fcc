"""`launch()`: the one function behind the CLI, `%dist_run` and the notebook runner.

Reads top to bottom: the options checked -> the job (job.py: settings, this server's place, the
job link and node 0's identity, the plan, preflight, tracking, every attempt supervised) -> the
summary line -> the result (raise JobFailed when it failed).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from platform_plugin.launcher.job import Job, job_summary, write_line
from platform_plugin.launcher.keywords import LaunchKeywords, from_kwargs
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.processes.result import JobFailed, JobResult
from platform_plugin.util.folders import check_cwd

if TYPE_CHECKING:  # (Unpack is in typing from 3.11; the package runs on 3.9)
    from typing_extensions import Unpack


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
    job = Job(cmd, options)
    result, hidden = job.run()
    summary = job_summary(result, hidden)
    if result.job_file_error:  # a full disk: say what the record holds, it is still readable
        summary += f"\n[launcher] job.json: {result.job_file_error}"
    write_line(job.options.write, summary)
    if job.options.check and not result.ok:
        raise JobFailed(result)
    return result
