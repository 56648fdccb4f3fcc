"""The comparison in a notebook, `%dist_compare [JOB]` / `platform_plugin.compare()`: the ranks
of a job side by side in the cell — the per-rank table (table.py), a chart of every rank's
curve, and the MLflow page that overlays them (in an IFrame when the UI is reachable through the
Jupyter server, jupyter_ui.py, else as a link)."""
from __future__ import annotations

import base64
import html
import io
import json
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from platform_plugin.comparison import job_end, jupyter_proxy, jupyter_ui, spools
from platform_plugin.comparison import table as comparing
from platform_plugin.comparison.rendering import ranks_text
from platform_plugin.errors import PlatformPluginError
from platform_plugin.launcher.display.quiet import libraries_to_log
from platform_plugin.tracking.shared.job_folders import find_spool_dirs
from platform_plugin.tracking.shared.jupyter_session import kernel_id
from platform_plugin.variables import PLATFORM_NOTEBOOK


@dataclass
class Comparison:
    job_id: str
    metric: str
    rows: list
    series: dict
    table: str  # the table and its flagged ranks' lines, as `platform-run compare` prints them
    url: str | None = None  # the MLflow page overlaying the ranks, as the browser can open it
    embedded: bool = False  # the page was shown in an IFrame
    notes: list = field(default_factory=list)  # said above the table (the metric picked)
    ui_notes: list = field(default_factory=list)  # why the page is not embedded, or not there
    colours: dict = field(default_factory=dict)  # rank label -> its run's colour in MLflow
    experiment: str | None = None  # the MLflow experiment of the job's runs
    # set once the MLflow page is known (the UI started in the background, or could not)
    ui_ready: threading.Event = field(default_factory=threading.Event, repr=False)


def compare(job: str | None = None, metric: str | None = None, *, log_dir: str | None = None,
            tolerance: float = 0.1, ui: bool = True, show: bool = True) -> Comparison:
    """Compare the ranks of `job` (default: the latest tracked job); display it when `show`.
    `metric` None: "loss" when a rank logged it, else the first metric logged (a note says so).
    A job whose ranks all ran here is read from its spools (no MLflow import); the MLflow UI
    starts in the background (`ui_ready` is set when its page is shown)."""
    comparing.check_tolerance(tolerance)
    attempts = find_spool_dirs(job, log_dir)
    spool_dir = attempts[-1]  # the latest attempt's: its runs go on from the earlier ones'
    runs = comparing.job_runs(spool_dir)
    job_id = runs.config.job.get("job_id", spool_dir.parent.name)
    points, runs = _points(attempts, runs)
    ending = job_end.from_job_folder(spool_dir.parent)
    notes = ending.lines() if ending else []
    if metric is None:
        metric, note = comparing.default_metric(points.metrics())
        notes += [note] if note else []
    series = points.series(metric)
    rows = comparing.rank_rows(series, metric, tolerance=tolerance)
    if not rows:  # the metrics there are, as `platform-run compare` names them
        with libraries_to_log(str(spool_dir.parent), verbose=False):
            raise comparing.no_such_metric(job_id, [metric], points.metrics())
    result = Comparison(job_id, metric, rows, series,
                        ranks_text(rows, metric, points, runs.servers,
                                   ending.unfinished if ending else None),
                        notes=notes,
                        colours=comparing.run_colours(runs),
                        experiment=runs.config.experiment_name)
    if show:  # the table and chart first: the UI takes seconds to start
        _display_table_and_chart(result)
    if not (ui and runs.run_ids):
        result.ui_ready.set()
    elif show:
        _show_ui(result, runs)
    else:
        _ui_page(result, runs)
        result.ui_ready.set()
    return result


def _points(attempts, runs):
    """(the job's points, its runs): from its spools (every attempt's) when every rank ran
    here, else from the tracking store (the ranks of other servers)."""
    spool_dir = attempts[-1]
    if spools.all_here(spool_dir, runs.config):
        return spools.read_attempts(attempts, spools.rank_labels(spool_dir, runs.config)), runs
    with libraries_to_log(str(spool_dir.parent), verbose=False), _interrupt_held():
        from platform_plugin.comparison import store  # MLflow: ranks that are not here

        client = store.client(runs.config.tracking_uri)  # (MLflow's import warnings)
        runs = store.with_store_ranks(runs, client)
        return store.StorePoints(runs, client), runs


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
        result.ui_notes.append("the tracking server's own page (reachable if your browser reaches it)")
        return
    try:
        port = jupyter_ui.ensure_ui(uri)
    except PlatformPluginError as exc:
        result.ui_notes.append(f"no MLflow UI: {str(exc).splitlines()[0]}")
        return
    server = jupyter_proxy.jupyter_server()
    result.url = comparing.metric_url(jupyter_proxy.browser_base(port, server), runs,
                                      [result.metric])
    result.embedded = jupyter_proxy.reachable(port, server)
    if not result.embedded:
        result.ui_notes.append("the MLflow UI is not reachable through a Jupyter server here: "
                            "the link works from a browser on this machine")


def _display_table_and_chart(result: Comparison) -> None:
    from IPython.display import display

    notes = "".join(f"{note}\n" for note in result.notes)
    title = f"job {result.job_id}" + (f", MLflow experiment {result.experiment!r}"
                                      if result.experiment else "")
    # a <pre>, not a table of lines: JupyterLab right-aligns table cells and collapses their
    # spaces (td: white-space nowrap), which scrambled the columns. pre-wrap: the lines under
    # the table (a straggler's reasons) wrap at the cell's width as in a terminal, instead of
    # scrolling the whole block sideways
    display({"text/plain": f"{title}\n{notes}{result.table}",
             "text/html": f"<b>{html.escape(title)}</b><pre style='margin:2px 0 8px;white-space:pre-wrap'>"
                          f"{html.escape(notes + result.table)}</pre>"}, raw=True)
    fig = comparing.figure({result.metric: result.series}, f"{result.job_id}: per rank",
                           result.colours)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=90)
    display({"image/png": base64.b64encode(png.getvalue()).decode("ascii"),
             "text/plain": f"[chart: {result.metric} of every rank by step, job {result.job_id}]"},
            raw=True)


def _show_ui(result: Comparison, runs) -> None:
    """A "starting the MLflow UI" line under the chart, replaced by the page once the UI
    answers: in a thread, so the cell ends with the table and chart. A notebook run without a
    user (papermill: PLATFORM_NOTEBOOK) waits for it in the cell, or the saved notebook would
    keep the line."""
    from IPython.display import display

    if jupyter_ui.running(runs.config.tracking_uri or ""):  # started while the job ran: at once
        _ui_page(result, runs)
        display(ui_bundle(result), raw=True)
        result.ui_ready.set()
        return
    handle = display({"text/plain": STARTING, "text/html": f"<i>{html.escape(STARTING)}</i>"},
                     raw=True, display_id=True)

    def work() -> None:
        try:
            _ui_page(result, runs)
        except Exception as exc:  # noqa: BLE001 - the table and chart stand; say why no page
            result.ui_notes.append(f"no MLflow UI: {type(exc).__name__}: {exc}")
        finally:
            handle.update(ui_bundle(result), raw=True)
            result.ui_ready.set()

    if PLATFORM_NOTEBOOK.is_set():
        work()
    else:
        threading.Thread(target=work, name="platform-mlflow-ui", daemon=True).start()


STARTING = "starting the MLflow UI… (the table and chart above are complete)"


def ui_bundle(result: Comparison) -> dict:
    """The MLflow page's output. Embedded, it is an iframe whose first document (srcdoc) asks
    the UI's /health through the Jupyter server and only then opens the page: a notebook
    reopened after its kernel ended (the UI stops with it) shows how to see the page again, not
    jupyter-server-proxy's "500 : Internal Server Error" page. The same document closes
    MLflow's Assistant panel, which opens by itself on a loopback host and hides the chart's
    last steps: the UI offers no URL parameter for it, only its two localStorage settings
    (MLflow 3.17: `useLocalStorage` keys `<key>_v<version>`), shared by the pages of the
    Jupyter server's origin."""
    lines = list(result.ui_notes)
    link = ""
    if result.url:
        lines.append(f"MLflow page, every rank's {result.metric} overlaid: {result.url}")
        link = (f"<a href='{html.escape(result.url)}' target='_blank'>MLflow: every rank's "
                f"{html.escape(result.metric)} overlaid</a>")
    notes = "".join(f"<div>{html.escape(note)}</div>" for note in result.ui_notes)
    frame = _frame(result) if result.embedded and result.url else ""
    return {"text/plain": "\n".join(lines) or "no MLflow page",
            "text/html": f"{notes}{link}{frame}"}


AGAIN = ("The MLflow UI that showed this page is not running: it stops with the kernel that "
         "started it. The chart above shows the same ranks. To see the page again, run "
         "%dist_compare {job} in a kernel (or `platform-run ui` in a terminal).")
FRAME_HEIGHT = 560  # px, as the cell shows it
# MLflow 3.17's metric page needs ~858 px for its main pane beside its ~208 px navigation: a
# narrower frame (JupyterLab's side panel open, a 1280 px screen) hid the chart's last steps
# behind a horizontal scroll. The page is then laid out this wide and scaled down to the cell.
PAGE_MIN_WIDTH = 1100
# installed in JupyterLab's own window (the frame's document is replaced by MLflow's page, the
# function must outlive it): keeps the frame's scale as the cell's width changes
FIT = ("function go(){var w=box.clientWidth;if(!w)return;var s=Math.min(1,w/need);"
       "f.style.width=s<1?need+'px':'100%';f.style.height=(h/s)+'px';"
       "f.style.transform=s<1?'scale('+s+')':'';f.style.transformOrigin='0 0';"
       "box.style.height=h+'px';}go();new ResizeObserver(go).observe(box);")
ASSISTANT_CLOSED = {"mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true",
                    "mlflow.assistant.panelOpen_v1": "false"}


def _frame(result: Comparison) -> str:
    url = result.url or ""
    health = url.split("#", 1)[0].rstrip("/") + "/health"
    # the kernel that owns the UI is asked first (a 404 once it ended): a request proxied to the
    # gone UI would make jupyter-server-proxy log a ConnectionRefusedError traceback each time
    # the saved notebook is opened
    kernel = kernel_id()
    owner = (url.split("/proxy/", 1)[0] + f"/api/kernels/{kernel}") if kernel and "/proxy/" in url else ""
    settings = json.dumps(ASSISTANT_CLOSED).replace("<", "\\u003c")
    script = (f"var page={json.dumps(url)},health={json.dumps(health)},owner={json.dumps(owner)},"
              f"keep={settings};"
              "(owner?fetch(owner,{cache:'no-store'}).then(function(r){if(!r.ok)throw 0;})"
              ":Promise.resolve())"
              ".then(function(){return fetch(health,{cache:'no-store'});})"
              ".then(function(r){return r.ok?r.text():''})"
              ".then(function(t){if(t.trim()!=='OK')throw 0;"
              "try{for(var k in keep)localStorage.setItem(k,keep[k]);}catch(e){}"
              f"try{{var f=window.frameElement;new window.parent.Function('f','box','need','h',"
              f"{json.dumps(FIT)})(f,f.parentElement,{PAGE_MIN_WIDTH},{FRAME_HEIGHT});}}catch(e){{}}"
              "location.replace(page);})"
              ".catch(function(){document.getElementById('wait').hidden=true;"
              "document.getElementById('gone').hidden=false;"
              "try{window.frameElement.style.height='6em';}catch(e){}});").replace("<", "\\u003c")
    doc = ("<!doctype html><html><body style='font:13px sans-serif;margin:8px;color:#333'>"
           "<p id='wait'>opening the MLflow page…</p>"
           f"<p id='gone' hidden>{html.escape(AGAIN.format(job=result.job_id))}</p>"
           f"<script>{script}</script></body></html>")
    return (f"<div style='overflow:hidden;width:100%'><iframe srcdoc=\"{html.escape(doc, quote=True)}\" "
            f"width='100%' height='{FRAME_HEIGHT}' style='border:1px solid #ddd;display:block'>"
            "</iframe></div>")
