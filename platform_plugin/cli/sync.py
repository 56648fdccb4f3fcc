"""`platform-run sync [JOB]`: deliver tracked params/metrics still waiting in a job's spool."""
from __future__ import annotations

import os
import signal
import sys

from platform_plugin.cli.flags import add_job, add_log_dir
from platform_plugin.errors import ConfigError
from platform_plugin.tracking.shared.job_folders import find_spool_dirs
from platform_plugin.tracking.delivery.replay import DEFAULT_WAIT_S, sync_spool_dir
from platform_plugin.util.envfile import export_mlflow_settings
from platform_plugin.util.numbers import NOT_NEGATIVE, number_argument
from platform_plugin.util.stops import INTERRUPTED_EXIT, is_interruption, raise_interrupt

END_STATUSES = ("FINISHED", "FAILED", "KILLED")


def register(subparsers) -> None:
    p = subparsers.add_parser("sync", help="deliver tracked params/metrics still waiting in a job's spool",
                              description="Replay a job's spool into its sink exactly once: lines "
                              "already delivered (per the offset files) are never sent again.")
    add_job(p)
    add_log_dir(p)
    p.add_argument("--end", choices=END_STATUSES, metavar="STATUS",
                   help="also end the job's runs with STATUS (FINISHED|FAILED|KILLED), e.g. after "
                        "the launching process itself was killed")
    p.add_argument("--wait", default=DEFAULT_WAIT_S, metavar="SECONDS",
                   type=number_argument("TRACKING_SYNC_WAIT", "--wait", bounds=NOT_NEGATIVE,
                                        infinite=True),
                   help="keep retrying this long while the sink is unreachable or refuses for now, "
                        f"e.g. a server still starting (default {DEFAULT_WAIT_S:g}; 0 = one attempt; "
                        "inf = until delivered: Ctrl-C or SIGTERM stops it, nothing is lost)")
    p.add_argument("--to", metavar="URI",
                   help="send to this MLflow store from now on (recorded in the job's sink.json): "
                        "the job's store at its new path or URL, or a store for a job whose URI "
                        "never worked; refused when part of the job already went elsewhere")
    p.add_argument("--from-start", action="store_true",
                   help="with --to: send the whole job again from its spool into a store that "
                        "does not hold it (e.g. the job's store was lost)")
    p.set_defaults(func=run)


def run(args) -> int:
    if not args.wait >= 0:  # also nan, which compares false to everything
        raise ConfigError(f"--wait {args.wait:g}: give the seconds to keep retrying, 0 or more",
                          code="TRACKING_SYNC_WAIT")
    if args.from_start and not args.to:
        raise ConfigError("--from-start sends the whole job into the store --to URI names: "
                          "give --to", code="TRACKING_SYNC_TO")
    export_mlflow_settings(os.getcwd(), os.environ)  # the team server's credentials, as the job's
    signal.signal(signal.SIGTERM, raise_interrupt)  # `--wait inf` in the background: stop as Ctrl-C
    try:
        return _sync(args)
    except BaseException as exc:  # offsets are written per accepted batch: a rerun resumes there
        if not is_interruption(exc):
            raise
        print("\nplatform-run sync: interrupted; what was delivered is recorded, the rest stays "
              "in the spool for the next `platform-run sync`", file=sys.stderr)
        return INTERRUPTED_EXIT


def _sync(args) -> int:
    waiting = 0
    for spool_dir in find_spool_dirs(args.job, args.log_dir):
        res = sync_spool_dir(spool_dir, end_status=args.end, wait=args.wait, to=args.to,
                             from_start=args.from_start, job=args.job or "JOB")
        c = res.counts
        print(f"{spool_dir}: sent {res.delivered_now} now; delivered {c.delivered}, pending {c.pending}, "
              f"skipped {c.skipped}, rejected {c.rejected}"
              + (f", {c.partial_lines} partial last line(s) ignored" if c.partial_lines else "")
              + ("; runs ended" if res.ended else "")
              + (f"\n  set aside: {res.set_aside}" if res.set_aside else "")
              + (f"\n  {res.aggregates}" if res.aggregates else "")
              + (f"\n  last error (after {res.attempts} attempt(s)): {res.error}" if res.error else ""))
        waiting += c.pending
    return 1 if waiting else 0
