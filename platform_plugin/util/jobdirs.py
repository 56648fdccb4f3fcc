"""Job folders: where they go, what their files are called, which one is the latest.

The one owner of these names: the launcher writes them, the doctor, `platform-run sync|compare`
and the notebook runner find them here. (The job id itself is made by
`tracking.rank.job_id.new_job_id`: a rank run without the launcher names its job the same way.)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from platform_plugin.variables import PLATFORM_LOG_DIR

JOB_FILE = "job.json"  # the plan at the start, the result at the end (launcher/processes/jobfile.py)
MAX_JOB_FILE_BYTES = 64 << 20  # a bound for its readers: thousands of ranks' plan and result fit


def job_log_dir(explicit: str | None = None, *, environ: Mapping[str, str] | None = None,
                cwd: str | None = None) -> str:
    """Where job folders go, as an absolute path: `--log-dir`, else PLATFORM_LOG_DIR, else
    ./platform_logs — relative to `cwd` (default: the current folder). The launcher, the
    magic, tracking and the doctor all look here, so a job is found where it was written."""
    chosen = explicit or PLATFORM_LOG_DIR.get(environ)
    return os.path.abspath(os.path.join(cwd or os.getcwd(), chosen))


def log_name(process: str) -> str:
    """The log file of a process in its job folder: `rank_3.log`, `sched.log`."""
    return f"rank_{process}.log" if process.isdigit() else f"{process}.log"


def error_file_name(process: str, attempt: int) -> str:
    """Where a rank's torch `@record` writes its exception (TORCHELASTIC_ERROR_FILE), one per
    attempt (1 first): `rank_3.attempt1.error.json`."""
    return f"rank_{process}.attempt{attempt}.error.json"


def latest_job(log_dir: str | os.PathLike, markers: Iterable[str] = (JOB_FILE,)) -> Path | None:
    """The job folder in `log_dir` whose newest marker file (a glob relative to the job folder,
    e.g. `job.json` or `tracking*/sink.json`) changed last; None when no folder has one."""
    base = Path(log_dir)
    newest: tuple[float, Path] | None = None
    for job in (d for d in base.iterdir() if d.is_dir()) if base.is_dir() else ():
        for marker in markers:
            for path in job.glob(marker):
                try:
                    stamp = path.stat().st_mtime
                except OSError:  # removed while we looked
                    continue
                if newest is None or stamp > newest[0]:
                    newest = (stamp, job)
    return newest[1] if newest else None
