"""`platform-run compare [JOB]`: the ranks of a job side by side."""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from platform_plugin.tracking import compare
from platform_plugin.tracking.job_folders import find_spool_dirs
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink

DEFAULT_UI = "http://127.0.0.1:5000"


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="compare ranks of a job: per-rank table, straggler, plot, MLflow URL")
    p.add_argument("job", nargs="?", help="job id or job folder (default: the latest job)")
    p.add_argument("--metric", default="loss", help="metric to compare (default: loss)")
    p.add_argument("--plot", metavar="PNG", help="write per-rank curves here and log the PNG to the job's run")
    p.add_argument("--url", action="store_true", help="print the MLflow page overlaying every rank")
    p.add_argument("--ui", help="MLflow UI base URL (default: PLATFORM_MLFLOW_UI, an http tracking "
                                f"URI, else {DEFAULT_UI} as `platform-run ui` starts it)")
    p.add_argument("--tolerance", type=float, default=0.1,
                   help="relative gap that flags a straggler or a deviating final value (default 0.1)")
    p.add_argument("--log-dir", help="where jobs live (default: PLATFORM_LOG_DIR or ./platform_logs)")
    p.set_defaults(func=run)


def ui_base(explicit: str | None, tracking_uri: str | None) -> str:
    if explicit or os.environ.get("PLATFORM_MLFLOW_UI"):
        return explicit or os.environ["PLATFORM_MLFLOW_UI"]
    if urlparse(tracking_uri or "").scheme in ("http", "https"):
        return tracking_uri
    return DEFAULT_UI


def run(args) -> int:
    spool_dir = find_spool_dirs(args.job, args.log_dir)[0]
    runs = compare.job_runs(spool_dir)
    client = MlflowSink().client(runs.config.tracking_uri)
    series = compare.load_series(runs, args.metric, client)
    rows = compare.rank_rows(series, args.metric, tolerance=args.tolerance)
    job_id = runs.config.job.get("job_id", spool_dir.parent.name)
    if not rows:
        print(f"{job_id}: no rank logged {args.metric!r}")
        return 1
    print(f"job {job_id}  ({runs.config.tracking_uri})")
    print(compare.render(rows, args.metric))
    if args.plot:
        png = compare.plot(series, args.metric, Path(args.plot), f"{job_id}: {args.metric} per rank")
        target = runs.config.parent_run_id or next(iter(runs.run_ids.values()))
        client.log_artifact(target, str(png), "compare")
        print(f"plot: {png} (also logged to run {target})")
    if args.url:
        print(compare.metric_url(ui_base(args.ui, runs.config.tracking_uri), runs, args.metric))
    return 0
