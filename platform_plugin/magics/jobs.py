"""`%dist_jobs`, `%dist_attach [JOB]`, `%dist_wait [JOB]`, `%dist_stop [JOB]`: the jobs of this
project from any kernel, any notebook - after a page reload, from a second notebook, a job that
`platform-run launch --detach` started (the CLI's `jobs`, `attach`, `stop` in the cell).

    %dist_run --background python train.py   # returns at once: the job's live board
    %dist_attach                             # the newest job: its board, live, then its result
    %dist_jobs                               # every job: running, succeeded, failed, lost
    %dist_wait                               # until it ends; JobFailed when it failed
    %dist_stop                               # as the stop button of a foreground job
"""
from __future__ import annotations

from IPython.core.magic import line_magic, magics_class

from platform_plugin.cli.flags import add_log_dir
from platform_plugin.cli.jobs import RECENT, jobs_table
from platform_plugin.launcher.display.notebook_display import ipython_publisher
from platform_plugin.launcher.jobs.handle import BackgroundJob
from platform_plugin.launcher.jobs.live import LiveBoard, result_text
from platform_plugin.launcher.jobs.records import JobRecord, list_jobs, resolve
from platform_plugin.launcher.jobs.stopping import request_stop, wait_ended
from platform_plugin.launcher.processes.result import JobFailed
from platform_plugin.magics.tools import MagicParser, ShellMagics, parsed

STARTED: dict[str, BackgroundJob] = {}  # this kernel's background jobs, by id (their handles)


def remember(job: BackgroundJob) -> None:
    STARTED[job.job_id] = job


def _parser(prog: str, description: str, job: str | None = None) -> MagicParser:
    parser = MagicParser(prog=prog, description=description)
    if job is not None:
        parser.add_argument("job", nargs="?", help=job)
    add_log_dir(parser)
    return parser


@magics_class
class JobMagics(ShellMagics):
    @line_magic
    def dist_jobs(self, line: str):
        """This project's jobs, newest first (`--all`: every one). `%dist_jobs --help`."""
        parser = _parser("%dist_jobs", "This project's jobs, newest first: running, succeeded, "
                         "failed, interrupted, lost (its launcher ended without a result).")
        parser.add_argument("--all", action="store_true", help=f"every job (default: the "
                            f"running ones and the {RECENT} newest others)")
        args = parsed(parser, line, "%dist_jobs")
        if args is None:
            return None
        records = list_jobs(args.log_dir)
        if not args.all:
            ended = [r for r in records if not r.running][:RECENT]
            records = [r for r in records if r.running or r in ended]
        print(jobs_table(records) if records else "no jobs in this log folder")
        self.user_ns["_dist_jobs"] = [r.to_dict() for r in records]
        return None

    @line_magic
    def dist_attach(self, line: str):
        """Follow a job (default: the newest): its live board, then its result. The stop button
        detaches; the job goes on."""
        args = parsed(_parser("%dist_attach", "Follow a job: its live board, then its result. "
                              "The stop button detaches (the job goes on).",
                              "job id, the start of one, or its folder (default: the newest)"),
                      line, "%dist_attach")
        if args is None:
            return None
        record = resolve(args.job, args.log_dir)
        board = LiveBoard(record.job_dir, ipython_publisher())
        try:
            ended = board.follow()
        except KeyboardInterrupt:
            board.detach()
            print(f"[launcher] detached from job {record.job_id}: it goes on (%dist_attach "
                  f"{record.job_id} follows it again, %dist_stop {record.job_id} stops it)")
            return None
        self.user_ns["_dist_result"] = ended.result()
        return None

    @line_magic
    def dist_wait(self, line: str):
        """Wait for a job (default: this kernel's last background job, else the newest running
        one); JobFailed when it failed, as a foreground %dist_run raises."""
        __tracebackhide__ = True
        args = parsed(_parser("%dist_wait", "Wait until a job ends; JobFailed when it failed.",
                              "job id, the start of one, or its folder"), line, "%dist_wait")
        if args is None:
            return None
        job = self._handle(args.job, args.log_dir)
        try:
            result = job.wait()
        except KeyboardInterrupt:
            print(f"[launcher] stopped waiting for job {job.job_id}: it goes on")
            return None
        except JobFailed as exc:
            self.user_ns["_dist_result"] = exc.result
            raise exc.with_traceback(None) from None
        self.user_ns["_dist_result"] = result
        return None

    @line_magic
    def dist_stop(self, line: str):
        """Stop a job (default: the newest running one) as the stop button would."""
        args = parsed(_parser("%dist_stop", "Stop a running job as the stop button would: the "
                              "hung ranks' stacks, SIGTERM, SIGKILL after the grace, the result "
                              "table, its runs KILLED.", "job id, the start of one, or its "
                              "folder (default: the newest running job)"), line, "%dist_stop")
        if args is None:
            return None
        record = resolve(args.job, args.log_dir, running=args.job is None)
        if not request_stop(record):
            print(f"job {record.job_id} is not running ({record.state})")
        else:
            print(f"[launcher] asked job {record.job_id} to stop")
            try:
                record = wait_ended(record.job_dir)
            except KeyboardInterrupt:
                print(f"[launcher] stopped waiting: job {record.job_id} is stopping")
                return None
        text = result_text(record)
        if text:
            print(text)
        self.user_ns["_dist_result"] = record.result()
        return None

    def _handle(self, job: str | None, log_dir: str | None) -> BackgroundJob:
        """This kernel's handle of the job (it knows the launcher process), else one made from
        the job's folder."""
        if job is None and STARTED:
            return list(STARTED.values())[-1]
        record: JobRecord = resolve(job, log_dir, running=job is None)
        return STARTED.get(record.job_id) or BackgroundJob(record.job_id, record.job_dir,
                                                           how=record.launcher.get("how", "?"))


def register(ipython) -> None:
    ipython.register_magics(JobMagics)
