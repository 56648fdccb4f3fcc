"""`platform-run compare [JOB]`: the ranks of a job side by side."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from platform_plugin.cli.flags import add_job, add_log_dir, add_metric, add_tolerance, metrics_of
from platform_plugin.errors import ConfigError
from platform_plugin.comparison import job_end, report_log, spools, table as compare
from platform_plugin.comparison.rendering import ranks_text
from platform_plugin.comparison.jupyter_proxy import browser_base, jupyter_server
from platform_plugin.tracking.shared.job_folders import find_spool_dirs
from platform_plugin.tracking.shared.uri_check import check_tracking_uri, sqlite_file
from platform_plugin.util.envfile import export_mlflow_settings
from platform_plugin.util.folders import check_writable_folder
from platform_plugin.variables import PLATFORM_MLFLOW_UI

DEFAULT_UI_PORT = 5000  # `mlflow ui`'s
DEFAULT_UI = f"http://127.0.0.1:{DEFAULT_UI_PORT}"


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="compare ranks of a job: per-rank table, straggler, plot, MLflow URL")
    add_job(p)
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
    if tracking_uri and urlparse(tracking_uri).scheme in ("http", "https"):
        return tracking_uri
    server = jupyter_server()  # in a JupyterLab terminal: the UI through the Jupyter server
    return browser_base(DEFAULT_UI_PORT, server) if server else DEFAULT_UI


def find_job(job: str | None, log_dir: str | None):
    """Where the job's points are: its spools when every rank ran here, else the tracking
    store (the ranks of other servers). A job id with no folder here (it ran on another
    server) is looked up in the tracking store."""
    try:
        attempts = find_spool_dirs(job, log_dir)
    except ConfigError:
        found = _in_store_only(job) if job else None
        if found is None:
            raise
        return found
    spool_dir = attempts[-1]  # the latest attempt's: its runs go on from the earlier ones'
    runs = compare.job_runs(spool_dir)
    job_id = runs.config.job.get("job_id", spool_dir.parent.name)
    db = sqlite_file(runs.config.tracking_uri or "")
    if db is not None and not os.path.exists(db):  # opening it would make an empty store there
        raise ConfigError(f"job {spool_dir.parent.name}'s store {runs.config.tracking_uri} does "
                          "not exist (the project moved, or the file was removed): compare reads "
                          "the ranks' runs from it", code="TRACKING_JOB")
    uri = runs.config.tracking_uri or ""
    check_tracking_uri(uri, f"job {spool_dir.parent.name}'s store")  # (refuses "")
    if spools.all_here(spool_dir, runs.config):
        labels = spools.rank_labels(spool_dir, runs.config)
        return Found(spools.read_attempts(attempts, labels), runs, job_id, None, spool_dir)
    from platform_plugin.comparison import store  # MLflow: ranks that are not here

    client = store.client(uri)
    runs = store.with_store_ranks(runs, client)
    return Found(store.StorePoints(runs, client), runs, job_id, client, spool_dir)


@dataclass
class Found:
    points: Any  # spools.LocalPoints | store.StorePoints: series(), values(), metrics()
    runs: compare.JobRuns
    job_id: str
    client: Any  # MLflow's client when the store was opened, else None
    spool_dir: Path | None


def _in_store_only(job: str) -> Found | None:
    from platform_plugin.comparison import store  # MLflow: a job whose folder is elsewhere
    from platform_plugin.tracking.sinks.mlflow_sink import default_tracking_uri

    uri = default_tracking_uri()
    db = sqlite_file(uri)
    if db is not None and not os.path.exists(db):
        return None  # no store, so no job in it: looking must not create one
    client = store.client(uri)
    runs = store.job_runs_in_store(job, client, uri)
    return None if runs is None else Found(store.StorePoints(runs, client), runs, job, client, None)


def _ending(found: Found) -> job_end.JobEnding | None:
    """How the job ended: its job.json here, else its parent run's status in the store."""
    ending = job_end.from_job_folder(found.spool_dir.parent if found.spool_dir else None)
    if ending is None and found.client is not None and found.runs.config.parent_run_id:
        try:
            run = found.client.get_run(found.runs.config.parent_run_id)
        except Exception:  # noqa: BLE001 - the table stands without the headline
            return None
        ending = job_end.from_run_status(run.info.status)
    return ending


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
    found = find_job(args.job, args.log_dir)
    points, runs, job_id, client = found.points, found.runs, found.job_id, found.client
    metrics = metrics_of(args.metric)
    note = None
    if not metrics:
        metric, note = compare.default_metric(points.metrics())
        metrics = [metric]
    series = {m: points.series(m) for m in metrics}
    missing = [m for m in metrics if not any(series[m].values())]
    if missing:
        raise compare.no_such_metric(job_id, missing, points.metrics())
    print(f"job {job_id}  ({runs.config.tracking_uri})")
    ending = _ending(found)
    for line in ending.lines() if ending else []:
        print(line)
    if note:
        print(note)
    target = runs.config.parent_run_id or next(iter(runs.run_ids.values()), None)
    tables = {}
    for metric in metrics:
        rows = compare.rank_rows(series[metric], metric, tolerance=args.tolerance)
        print(ranks_text(rows, metric, points, runs.servers, ending.unfinished if ending else None))
        tables[f"compare/{metric}.json"] = compare.table_data(rows, metric)
    png = str(compare.plot(series, Path(args.plot), f"{job_id}: per rank",
                           compare.run_colours(runs))) if args.plot else None
    if target is None:
        print("note: the job has no run in the store yet (not delivered): the tables are not logged")
    elif client is not None:  # the store is open: log there and then
        for line in report_log.log_report(client, target, tables, png):
            print(line)
    else:
        report_log.log_in_background(found.spool_dir, runs.config.tracking_uri or "", target,
                                     tables, png)
    if png and target is not None:
        print(f"plot: {png} (also logged to run {target} under compare/)")
    elif png:
        print(f"plot: {png}")
    if args.url:
        base = ui_base(args.ui, runs.config.tracking_uri)
        print(compare.metric_url(base, runs, metrics))
        silent = ui_silence(base, args.ui)
        if silent:
            print(silent)
    return 0


def ui_silence(base: str, explicit: str | None) -> str:
    """"" when the UI the link points at answers; else what to do about it: a link to a UI
    nobody runs opens "unable to connect" in the browser, with no word why."""
    import urllib.request  # (only for --url)
    # through a Jupyter server's proxy the UI itself listens on 127.0.0.1:<its port>
    target = (DEFAULT_UI if "/proxy/" in base and not explicit and not PLATFORM_MLFLOW_UI.is_set()
              else base)
    try:
        with urllib.request.urlopen(target.rstrip("/") + "/health", timeout=2) as answer:
            if answer.status == 200:
                return ""
    except OSError:
        pass
    except ValueError:  # not a URL urllib can open: nothing to say about it
        return ""
    if target == DEFAULT_UI:
        return (f"note: no MLflow UI answers at {DEFAULT_UI} (nothing is running there): start "
                "one with `platform-run ui` in another terminal (it prints this link too, and "
                "runs until Ctrl-C), then open the link")
    return (f"note: nothing answers at {target}/health: start that MLflow server, or give "
            "--ui the address of one that runs (`platform-run ui` starts one here)")
