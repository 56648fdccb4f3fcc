"""The comparison in a notebook, `%dist_compare [JOB]` / `platform_plugin.compare()`: the ranks
of a job side by side in the cell — the per-rank table (table.py), a chart of every rank's
curve, and the MLflow page that overlays them (in an IFrame when the UI is reachable through the
Jupyter server, jupyter_ui.py, else as a link)."""
from __future__ import annotations

import html
import io
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from platform_plugin.comparison import jupyter_ui
from platform_plugin.comparison import table as comparing
from platform_plugin.errors import PlatformPluginError
from platform_plugin.launcher.display.quiet import libraries_to_log
from platform_plugin.tracking.delivery.job_folders import find_spool_dirs
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink


@dataclass
class Comparison:
    job_id: str
    metric: str
    rows: list
    series: dict
    table: str  # the text table (as `platform-run compare` prints it)
    url: str | None = None  # the MLflow page overlaying the ranks, as the browser can open it
    embedded: bool = False  # the page was shown in an IFrame
    notes: list = field(default_factory=list)


def compare(job: str | None = None, metric: str = "loss", *, log_dir: str | None = None,
            tolerance: float = 0.1, ui: bool = True, show: bool = True) -> Comparison:
    """Compare the ranks of `job` (default: the latest tracked job); display it when `show`."""
    comparing.check_tolerance(tolerance)
    spool_dir = find_spool_dirs(job, log_dir)[0]
    runs = comparing.job_runs(spool_dir)
    with libraries_to_log(str(spool_dir.parent), verbose=False), _interrupt_held():
        client = MlflowSink().client(runs.config.tracking_uri)  # (MLflow's import warnings)
        series = comparing.load_series(runs, metric, client)
    rows = comparing.rank_rows(series, metric, tolerance=tolerance)
    job_id = runs.config.job.get("job_id", spool_dir.parent.name)
    if not rows:  # the metrics there are, as `platform-run compare` names them
        with libraries_to_log(str(spool_dir.parent), verbose=False):
            raise comparing.no_such_metric(job_id, [metric], runs, client)
    result = Comparison(job_id, metric, rows, series, comparing.render(rows, metric))
    if show:  # the table and chart first: the UI may take seconds to start
        _display_table_and_chart(result)
    if ui and runs.run_ids:
        _ui_page(result, runs)
        if show:
            _display_ui(result)
    return result


@contextmanager
def _interrupt_held():
    """The stop button waits for the block's end, then interrupts. The first comparison of a
    kernel imports MLflow and SQLAlchemy (seconds) and opens the store: a KeyboardInterrupt
    inside an import leaves a half-made module in sys.modules (`module 'sqlalchemy.sql' has no
    attribute 'base'`), and every later %dist_compare of the kernel failed with MLflow's
    traceback until a restart. Main thread only (signal handlers cannot be set elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _ui_page(result: Comparison, runs) -> None:
    uri = runs.config.tracking_uri
    if uri.startswith(("http://", "https://")):
        result.url = comparing.metric_url(uri, runs, [result.metric])
        result.notes.append("the tracking server's own page (reachable if your browser reaches it)")
        return
    try:
        port = jupyter_ui.ensure_ui(uri)
    except PlatformPluginError as exc:
        result.notes.append(f"no MLflow UI: {str(exc).splitlines()[0]}")
        return
    server = jupyter_ui.jupyter_server()
    result.url = comparing.metric_url(jupyter_ui.browser_base(port, server), runs,
                                      [result.metric])
    result.embedded = jupyter_ui.reachable(port, server)
    if not result.embedded:
        result.notes.append("the MLflow UI is not reachable through a Jupyter server here: "
                            "the link works from a browser on this machine")


def _display_table_and_chart(result: Comparison) -> None:
    from IPython.display import Image, display

    # a <pre>, not a table of lines: JupyterLab right-aligns table cells and collapses their
    # spaces (td: white-space nowrap), which scrambled the columns
    display({"text/plain": f"job {result.job_id}\n{result.table}",
             "text/html": f"<b>job {html.escape(result.job_id)}</b><pre style='margin:2px 0 8px'>"
                          f"{html.escape(result.table)}</pre>"}, raw=True)
    fig = comparing.figure({result.metric: result.series}, f"{result.job_id}: per rank")
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=90)
    display(Image(png.getvalue()))


def _display_ui(result: Comparison) -> None:
    from IPython.display import HTML, IFrame, display

    for note in result.notes:
        print(note)
    if result.url:
        display(HTML(f"<a href='{html.escape(result.url)}' target='_blank'>MLflow: every rank's "
                     f"{html.escape(result.metric)} overlaid</a>"))
        if result.embedded:
            display(IFrame(result.url, width="100%", height=560))
