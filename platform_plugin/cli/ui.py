"""`platform-run ui`: a local MLflow UI on the configured store, lean, loopback only."""
from __future__ import annotations

import os
import signal
import tempfile

from platform_plugin.cli import skip_the_last_collection
from platform_plugin.cli.flags import add_log_dir, add_metric
from platform_plugin.errors import ConfigError, Problem
from platform_plugin.comparison.jupyter_proxy import browser_base, jupyter_server
from platform_plugin.comparison.jupyter_ui import OwnedUI
from platform_plugin.comparison import store, table as compare
from platform_plugin.tracking.shared.job_folders import find_spool_dirs
from platform_plugin.tracking.server.mlflow_features import detect
from platform_plugin.util.numbers import ANY_PORT, number_argument
from platform_plugin.util.ports import check_free, free_port
from platform_plugin.tracking.server.local import HOST
from platform_plugin.tracking.shared.uri_check import scheme_of, uri_problem
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink, default_tracking_uri, sqlite_path
from platform_plugin.util.folders import check_writable_folder
from platform_plugin.util.stops import is_interruption, raise_interrupt


def register(subparsers) -> None:
    p = subparsers.add_parser("ui", help="start a local MLflow UI on the configured store")
    p.add_argument("--port", type=number_argument("UI_PORT", "--port", int, bounds=ANY_PORT),
                   default=5000, help="port on 127.0.0.1 (0 = any free port; default 5000)")
    add_metric(p, several=False, help="metric of the printed comparison page")
    p.add_argument("--store", help="backend store URI (default: MLFLOW_TRACKING_URI, refused "
                                   "when it is a server: open that one directly; else the jobs' "
                                   "own default, mlflow.db beside the CODE/ folder above the "
                                   "current folder, or in the current folder outside any CODE/: "
                                   "`platform-run env` shows it)")
    add_log_dir(p)
    p.set_defaults(func=run)


def store_uri(explicit: str | None) -> str:
    uri = explicit or default_tracking_uri()
    if uri.startswith(("http://", "https://")):
        raise ConfigError(f"MLFLOW_TRACKING_URI is a server ({uri}): open it directly, or pass "
                          "--store sqlite:///path/to/mlflow.db", code="TRACKING_UI")
    _check_store(uri)
    return uri


def _check_store(uri: str) -> None:
    """Refuse a store MLflow's server cannot open before it starts: it would die with a
    traceback in its log and this command would wait for it first (tracking/shared/uri_check.py: an
    unknown scheme, a folder store this MLflow no longer opens, a file that is no database)."""
    why = uri_problem(uri)
    if why:
        raise ConfigError([Problem("UI_STORE", f"--store {uri}: {why}", "--store")])
    scheme = scheme_of(uri)
    if scheme in ("", "file"):  # a folder store (MLFLOW_ALLOW_FILE_STORE): a folder, not a file
        check_writable_folder(uri.split("://", 1)[-1], "store", "UI_STORE", "--store")
    path = sqlite_path(uri)
    if path is not None and str(path) not in ("", ":memory:"):
        folder = os.path.dirname(os.path.abspath(path))
        check_writable_folder(folder, "store", "UI_STORE", "--store")


def latest_comparison(ui: str, metric: str, log_dir: str | None) -> str | None:
    runs = _latest_runs(log_dir)
    return compare.metric_url(ui, runs, metric) if runs and runs.run_ids else None


def latest_experiment(ui: str, log_dir: str | None) -> str | None:
    """The latest job's experiment on its runs table: MLflow 3.17 opens an experiment on what
    the UI's GenAI / Model training switch says (GenAI by default), so the link says it."""
    runs = _latest_runs(log_dir)
    if not runs or not runs.config.experiment_id:
        return None
    return f"{ui}/#/experiments/{runs.config.experiment_id}?workflowType=machine_learning"


def _latest_runs(log_dir: str | None):
    try:
        runs = compare.job_runs(find_spool_dirs(None, log_dir)[-1])  # the latest attempt's
    except ConfigError:
        return None
    if not runs.config.tracking_uri:
        return runs
    try:  # every server's ranks, from the store
        return store.with_store_ranks(runs, MlflowSink().client(runs.config.tracking_uri))
    except Exception:  # noqa: BLE001 - the local view is still a useful link
        return runs


def run(args) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError([Problem("UI_PORT", f"--port {args.port}: a TCP port is 0-65535 "
                                   "(0 = any free port)", "--port")])
    uri = store_uri(args.store)
    if args.port:  # refuse now, not after waiting for a server that cannot bind
        check_free(args.port, HOST, what="--port")
    signal.signal(signal.SIGTERM, raise_interrupt)
    skip_the_last_collection()  # after Ctrl-C: exit once the server has stopped
    port = args.port or free_port()
    ui = f"http://{HOST}:{port}"
    log = tempfile.NamedTemporaryFile(prefix="mlflow-ui-", suffix=".log", delete=False).name
    owned = OwnedUI(uri, port, log)  # stops with this command, even a SIGKILLed one
    try:
        # said before the wait: the server's start takes seconds (a minute on a loaded
        # machine), and a command that prints nothing meanwhile looks hung
        print(f"starting the MLflow UI on {ui} (store {uri}): the link follows once it "
              "answers", flush=True)
        owned.wait_healthy()
        print(f"MLflow UI: {ui}  (store {uri}; server log {log}; Ctrl-C stops it)", flush=True)
        server = jupyter_server()
        if server is not None:  # a JupyterLab terminal: the browser reaches the UI through it
            ui = browser_base(port, server).rstrip("/")
            print(f"from your browser (through JupyterLab): {ui}/", flush=True)
        url = latest_comparison(ui, args.metric, args.log_dir)
        print(f"latest job, ranks compared: {url}" if url else "no tracked job yet", flush=True)
        experiment = latest_experiment(ui, args.log_dir)
        if experiment:
            print(f"latest job's experiment (training runs): {experiment}", flush=True)
        features = detect()
        if features is not None:
            for text in features.missing():
                print(f"MLflow {features.version}: {text}", flush=True)
        owned.proc.wait()
    except BaseException as exc:  # Ctrl-C, SIGTERM: the server stops below and that is a success
        if not is_interruption(exc):
            raise
    finally:
        ended = owned.proc.poll()  # None: it served until stopped here (its teardown is cut)
        owned.stop()
    return 0 if ended in (0, -15, None) else 1
