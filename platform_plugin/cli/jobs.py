"""`platform-run jobs [--all] [--json]`, `platform-run attach [JOB]`, `platform-run stop JOB`:
the jobs of this project's log folder, running or ended, whoever started them (a cell, a
terminal, `--background`, `--detach`). Exit codes: jobs 0; attach the job's own (0 succeeded, 1
failed or lost, 130 interrupted; 0 after Ctrl-C detached); stop 0 once the job ended (1 if it
could not be stopped); 2 an unknown or ambiguous job, another user's job.
"""
from __future__ import annotations

import json
import sys
import time

from platform_plugin.cli import HELP
from platform_plugin.cli.flags import add_log_dir
from platform_plugin.launcher.jobs.live import attach_terminal, result_text
from platform_plugin.launcher.jobs.records import JobRecord, list_jobs, resolve
from platform_plugin.launcher.jobs.stopping import request_stop, wait_ended
from platform_plugin.util.texttable import render_rows

RECENT = 10  # ended jobs listed without --all (every running one is)
HEADERS = ["id", "name", "state", "ranks", "attempt", "started", "duration", "servers", "tracked"]


def register(subparsers) -> None:
    jobs = subparsers.add_parser("jobs", help=HELP["jobs"], description=HELP["jobs"] + (
        "; newest first. Lost: its launcher ended without a result (killed)."))
    jobs.add_argument("--all", action="store_true",
                      help=f"every job (default: the running ones and the {RECENT} newest others)")
    jobs.add_argument("--json", action="store_true", help="a JSON list of objects")
    add_log_dir(jobs)
    jobs.set_defaults(func=run_jobs)
    attach = subparsers.add_parser("attach", help=HELP["attach"], description=HELP["attach"] + (
        "; an ended job: its result. Ctrl-C detaches, the job goes on."))
    attach.add_argument("job", nargs="?", help="job id, the start of one, or its folder")
    add_log_dir(attach)
    attach.set_defaults(func=run_attach)
    stop = subparsers.add_parser("stop", help=HELP["stop"], description=HELP["stop"] + (
        ": the hung ranks' stacks, SIGTERM, SIGKILL after its grace, the result table, its "
        "runs ended KILLED. A second stop skips the grace."))
    stop.add_argument("job", help="job id, the start of one, or its folder")
    stop.add_argument("--no-wait", dest="wait", action="store_false",
                      help="return once the stop was sent")
    add_log_dir(stop)
    stop.set_defaults(func=run_stop)


def run_jobs(args) -> int:
    records = list_jobs(args.log_dir)
    if not args.all:
        ended = [r for r in records if not r.running][:RECENT]
        records = [r for r in records if r.running or r in ended]
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=1))
        return 0
    print(jobs_table(records) if records else "no jobs in this log folder")
    return 0


def jobs_table(records: list[JobRecord]) -> str:
    return render_rows(HEADERS, [_row(r) for r in records])


def _row(record: JobRecord) -> tuple:
    started = record.started
    return (record.job_id, record.name, record.state, str(record.ranks or ""),
            str(record.attempt), time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
            if started else "", duration(record.duration_s), str(record.servers), record.tracked)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.0f}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def run_attach(args) -> int:
    record = resolve(args.job, args.log_dir)
    return attach_terminal(record.job_dir)


def run_stop(args) -> int:
    record = resolve(args.job, args.log_dir)
    if not request_stop(record):
        print(f"job {record.job_id} is not running ({record.state})")
        text = result_text(record)
        if text:
            print(text)
        return 0
    print(f"[stop] asked job {record.job_id} to stop (its launcher, pid "
          f"{record.launcher.get('pid')}: the stacks, SIGTERM, SIGKILL after its grace)",
          file=sys.stderr)
    if not args.wait:
        return 0
    ended = wait_ended(record.job_dir)
    print(result_text(ended))
    return 0 if not ended.running else 1
