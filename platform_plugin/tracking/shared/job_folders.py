"""Find a job's spool folders from what a user types: a job id, a job folder, or nothing (the
latest job in the log folder)."""
from __future__ import annotations

import os
from pathlib import Path

from platform_plugin.errors import ConfigError
from platform_plugin.tracking.shared.state import SINK_FILE
from platform_plugin.util.jobdirs import job_log_dir, latest_job
from platform_plugin.util.paths import resolved

ATTEMPT_SPOOL_PREFIX = "tracking-attempt"


def spool_folder_name(attempt: int) -> str:
    """The spool folder of attempt 1, 2, ... in the job folder: `tracking`, `tracking-attempt-2`
    (named as the logs of attempt K are kept: `attempt-K/`)."""
    return "tracking" if attempt <= 1 else f"{ATTEMPT_SPOOL_PREFIX}-{attempt}"


def log_dir(explicit: str | None = None) -> Path:
    return resolved(job_log_dir(explicit), "log folder", "TRACKING_JOB", "--log-dir")


def spool_dirs_of(job_dir: Path) -> list[Path]:
    """The job's spool folders, one per attempt (`tracking`, `tracking-attempt-2`, ...), in the
    attempts' order: the last one is the latest attempt's."""
    if (job_dir / SINK_FILE).is_file():
        return [job_dir]
    return sorted((p for p in job_dir.glob("tracking*") if (p / SINK_FILE).is_file()),
                  key=attempt_number)


def later_attempt(spool_dir: str | os.PathLike[str]) -> bool:
    """Whether the job of this spool folder has a later attempt's (a restart followed)."""
    spool_dir = Path(spool_dir)
    return any(attempt_number(p) > attempt_number(spool_dir) for p in spool_dirs_of(spool_dir.parent))


def attempt_number(spool_dir: Path) -> int:
    """1 for `tracking`, K for `tracking-attempt-K` (spool_folder_name; an earlier version's
    `tracking-attemptK` too)."""
    suffix = spool_dir.name[len(ATTEMPT_SPOOL_PREFIX):].lstrip("-")
    return int(suffix) if spool_dir.name.startswith(ATTEMPT_SPOOL_PREFIX) and suffix.isdigit() else 1


def find_spool_dirs(job: str | None, explicit_log_dir: str | None = None) -> list[Path]:
    base = log_dir(explicit_log_dir)
    if job:
        candidates = [Path(job), base / job]
        for job_dir in candidates:
            if job_dir.is_dir() and spool_dirs_of(job_dir):
                return spool_dirs_of(job_dir)
        raise ConfigError(f"no tracked job {job!r}: give a job id from {base} or a job folder "
                          "(one holding tracking/sink.json)", code="TRACKING_JOB")
    jobs = [d for d in base.glob("*") if d.is_dir() and spool_dirs_of(d)] if base.is_dir() else []
    if not jobs:
        raise ConfigError(f"no tracked jobs in {base}: run a job first, or pass --log-dir / "
                          "PLATFORM_LOG_DIR", code="TRACKING_JOB")
    latest = latest_job(base, markers=(SINK_FILE, f"tracking*/{SINK_FILE}"))
    return spool_dirs_of(latest) if latest is not None else []
