"""`platform-run sync [JOB]`: deliver tracked params/metrics still waiting in a job's spool."""
from __future__ import annotations

from ..tracking.jobs import find_spool_dirs
from ..tracking.replay import sync_spool_dir

END_STATUSES = ("FINISHED", "FAILED", "KILLED")


def register(subparsers) -> None:
    p = subparsers.add_parser("sync", help="deliver tracked params/metrics still waiting in a job's spool",
                              description="Replay a job's spool into its sink exactly once: lines "
                              "already delivered (per the offset files) are never sent again.")
    p.add_argument("job", nargs="?", help="job id or job folder (default: the latest job)")
    p.add_argument("--log-dir", help="where jobs live (default: PLATFORM_LOG_DIR or ./platform_logs)")
    p.add_argument("--end", choices=END_STATUSES, metavar="STATUS",
                   help="also end the job's runs with STATUS (FINISHED|FAILED|KILLED), e.g. after "
                        "the launching process itself was killed")
    p.set_defaults(func=run)


def run(args) -> int:
    waiting = 0
    for spool_dir in find_spool_dirs(args.job, args.log_dir):
        res = sync_spool_dir(spool_dir, end_status=args.end)
        c = res.counts
        print(f"{spool_dir}: sent {res.delivered_now} now; delivered {c.delivered}, pending {c.pending}, "
              f"skipped {c.skipped}, rejected {c.rejected}"
              + (f", {c.partial_lines} partial last line(s) ignored" if c.partial_lines else "")
              + ("; runs ended" if res.ended else "")
              + (f"\n  not delivered: {res.error}" if res.error else ""))
        waiting += c.pending
    return 1 if waiting else 0
