"""`platform-run compare [JOB]`: the ranks of a job side by side."""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from platform_plugin.cli.flags import add_log_dir, add_metric, add_tolerance, metrics_of
from platform_plugin.errors import ConfigError
from platform_plugin.comparison import table as compare, diagnosis
from platform_plugin.comparison.jupyter_ui import browser_base, jupyter_server
from platform_plugin.tracking.delivery.job_folders import find_spool_dirs
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink, default_tracking_uri, sqlite_path
from platform_plugin.tracking.job.uri_check import check_tracking_uri
from platform_plugin.util.envfile import export_mlflow_settings
from platform_plugin.util.folders import check_writable_folder
from platform_plugin.variables import PLATFORM_MLFLOW_UI

DEFAULT_UI = "http://127.0.0.1:5000"


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="compare ranks of a job: per-rank table, straggler, plot, MLflow URL")
    p.add_argument("job", nargs="?", help="job id or job folder (default: the latest job)")
    add_metric(p)
    p.add_argument("--plot", metavar="PNG", help="write per-rank curves here (the PNG and the "
                   "tables are logged to the job's run under compare/)")
    p.add_argument("--url", action="store_true", help="print the MLflow page overlaying every rank")
    p.add_argument("--ui", help="MLflow UI base URL (default: PLATFORM_MLFLOW_UI, an http tracking "
                                f"URI, else {DEFAULT_UI} as `platform-run ui` starts it)")
    add_tolerance(p)
    add_log_dir(p)
    p.set_defaults(func=run)


def ui_base(explicit: str | None, tracking_uri: str | None) -> str:
    if explicit or PLATFORM_MLFLOW_UI.is_set():
        return explicit or PLATFORM_MLFLOW_UI.get()
    if urlparse(tracking_uri or "").scheme in ("http", "https"):
        return tracking_uri
    server = jupyter_server()  # in a JupyterLab terminal: the UI through the Jupyter server
    return browser_base(int(urlparse(DEFAULT_UI).port), server) if server else DEFAULT_UI


def find_job(job: str | None, log_dir: str | None):
    """(runs of every rank of the job from the tracking store, MLflow client, job id). A job
    id with no folder here (it ran on another server) is looked up in the tracking store."""
    try:
        spool_dir = find_spool_dirs(job, log_dir)[0]
    except ConfigError:
        if not job:
            raise
        uri = default_tracking_uri()
        db = sqlite_path(uri)
        if db is not None and not db.exists():
            raise  # no store, so no job in it: looking must not create one
        client = MlflowSink().client(uri)
        runs = compare.job_runs_in_store(job, client, uri)
        if runs is None:
            raise
        return runs, client, job
    runs = compare.job_runs(spool_dir)
    db = sqlite_path(runs.config.tracking_uri or "")
    if db is not None and not db.exists():  # opening it would make an empty store there
        raise ConfigError(f"job {spool_dir.parent.name}'s store {runs.config.tracking_uri} does "
                          "not exist (the project moved, or the file was removed): compare reads "
                          "the ranks' runs from it", code="TRACKING_JOB")
    check_tracking_uri(runs.config.tracking_uri or "", f"job {spool_dir.parent.name}'s store")
    client = MlflowSink().client(runs.config.tracking_uri)
    return (compare.with_store_ranks(runs, client), client,
            runs.config.job.get("job_id", spool_dir.parent.name))


def _check(args) -> None:
    """Before the store is opened: a tolerance that flags nothing (nan) or everything, and a
    plot that cannot be written after all the work."""
    compare.check_tolerance(args.tolerance)
    if args.plot:
        folder = os.path.dirname(os.path.abspath(args.plot))
        check_writable_folder(folder, "plot", "COMPARE_PLOT", "--plot")


def run(args) -> int:
    _check(args)
    export_mlflow_settings(os.getcwd(), os.environ)  # the team server's credentials, as the job's
    runs, client, job_id = find_job(args.job, args.log_dir)
    metrics = metrics_of(args.metric)
    series = {m: compare.load_series(runs, m, client) for m in metrics}
    missing = [m for m in metrics if not any(series[m].values())]
    if missing:
        raise compare.no_such_metric(job_id, missing, runs, client)
    system = diagnosis.system_summary(client, runs.run_ids)
    print(f"job {job_id}  ({runs.config.tracking_uri})")
    target = runs.config.parent_run_id or next(iter(runs.run_ids.values()))
    for metric in metrics:
        rows = compare.rank_rows(series[metric], metric, tolerance=args.tolerance)
        print(compare.render(rows, metric, runs.servers))
        for line in diagnosis.render(rows, system):
            print(line)
        data = compare.table_data(rows, metric)
        _log(lambda: _log_table(client, target, data, f"compare/{metric}.json"),
             f"compare/{metric}.json", target)
    if args.plot:
        png = compare.plot(series, Path(args.plot), f"{job_id}: per rank")
        _log(lambda: client.log_artifact(target, str(png), "compare"), f"compare/{png.name}", target)
        print(f"plot: {png} (also logged to run {target} under compare/)")
    if args.url:
        print(compare.metric_url(ui_base(args.ui, runs.config.tracking_uri), runs, metrics))
    return 0


def _log_table(client, run_id: str, data: dict, where: str) -> None:
    """MLflow's log_table the first time (it tags the run, so the UI lists the table). When the
    table is there (compare run again), log_table would download it and append this one: every
    row once more per compare. Then, and where log_table's pandas conversion fails (a pandas
    release it does not know), the same table in the same JSON layout (pandas' "split")
    replaces the file through log_dict."""
    folder = where.rsplit("/", 1)[0] if "/" in where else None
    if where not in {a.path for a in client.list_artifacts(run_id, folder)}:
        try:
            client.log_table(run_id, data=data, artifact_file=where)
            return
        except Exception:  # noqa: BLE001 - MLflow wraps the pandas error in its own exception
            pass
    client.log_dict(run_id, {"columns": list(data), "data": [list(r) for r in zip(*data.values())]},
                    where)


def _log(call, where: str, run_id: str) -> None:
    """Logging the report to the job's run is a bonus: a refusing store is a note, not a failure."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001
        print(f"note: could not log {where} to run {run_id}: {type(exc).__name__}: {exc}")
