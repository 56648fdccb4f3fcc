"""The MLflow pages of a real tracked job, served by `platform-run ui` and rendered in headless
Chromium: the experiment opens on its training runs, a child run's System metrics tab shows
the launcher's samples, the parent run charts the aggregates across ranks, and the comparison
page overlays the ranks.

The job is a real 2-rank launch (plain Python ranks logging through the tracker, system metrics
sampled by the launcher). With UPDATE_SCREENSHOTS=1 it is the MindSpore example instead
(notebooks/train_mindspore_digits.py, 2 CPU ranks of MindSpore's cluster, ~1.5 min) and the
pictures in docs/ are rewritten from it; otherwise screenshots stay in the test's folder."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from platform_plugin.launcher import launch
from tests.helpers import REPO
from tests.tracking.helpers import child_runs, client, hold_port, wait_for

pytestmark = pytest.mark.slow
UPDATE = os.environ.get("UPDATE_SCREENSHOTS") == "1"

RANK = """
import os, time
from platform_plugin import tracking
t = tracking.get_tracker()
rank = int(os.environ["RANK_ID"])
for step in range(40):
    time.sleep(0.05)
    t.log_metric("loss", 2.0 / (step + 1) + 0.05 * rank, step=step)
    t.log_metric("samples_per_s", 600.0 + 20 * rank, step=step)
"""


def real_job(tmp_path: Path):
    """(the folder to serve from, the job's result)."""
    quiet = {"write": lambda text: None, "nproc": 2, "system_metrics_interval": 0.5}
    if not UPDATE:
        (tmp_path / "ranks.py").write_text(RANK)
        return tmp_path, launch([sys.executable, "ranks.py"], cwd=str(tmp_path), **quiet)
    code = tmp_path / "digits" / "CODE"  # the platform's layout: the store lands beside CODE/
    shutil.copytree(REPO / "notebooks", code)
    result = launch([sys.executable, "train_mindspore_digits.py", "--epochs", "6"], cwd=str(code),
                    system_metrics_interval=1.0, write=lambda text: None, nproc=2)
    return code, result


def screenshot(page, tmp_path: Path, name: str) -> None:
    shot = (REPO / "docs" if UPDATE else tmp_path) / name
    close = page.locator("[aria-label='Close'], [aria-label='close']")
    if close.count():  # the assistant side panel opens itself on a local server
        close.first.click()
    page.wait_for_timeout(800)  # let the charts re-layout after the panel closes
    page.screenshot(path=str(shot))
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 10_000


def start_ui(folder: Path, port: int, *args: str) -> tuple[subprocess.Popen, str]:
    """`platform-run ui` in `folder` on `port`; the comparison URL it prints."""
    ui = subprocess.Popen([str(Path(sys.executable).with_name("platform-run")), "ui", "--port", str(port),
                           *args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=folder,
                          env=dict(os.environ), start_new_session=True)
    lines: list[str] = []
    url = wait_for(lambda: lines.append(ui.stdout.readline()) or
                   next((x.split(": ", 1)[1].strip() for x in lines if "ranks compared:" in x), None),
                   timeout=240, interval=0, what="the UI's comparison URL")
    return ui, url


def headless_chromium(playwright):
    """Debian's chromium, headless, quiet about updates (Playwright drives it)."""
    return playwright.chromium.launch(executable_path="/usr/bin/chromium", args=[
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update"])


def test_experiment_system_metrics_aggregates_and_comparison_render(tracking_env, tmp_path):
    from playwright.sync_api import sync_playwright
    folder, result = real_job(tmp_path)
    assert result.ok and result.tracking.wait_ended()
    c = client(f"sqlite:///{folder.resolve().parent / 'mlflow.db'}" if UPDATE else
               f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = c.get_run(result.tracking.parent_run_id)
    experiment = parent.info.experiment_id
    child = child_runs(c, parent.info.run_id)[0]
    held = hold_port()  # the UI's server binds it alongside; nobody else can take it meanwhile
    port = held.getsockname()[1]
    base = f"http://127.0.0.1:{port}/#"
    ui, compare_url = start_ui(folder, port)
    try:
        with sync_playwright() as p:
            browser = headless_chromium(p)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                # MLflow 3.17 picks an experiment's first tab from the UI's workflow switch (GenAI
                # by default: the overview), not from mlflow.experimentKind: the link carries it
                page.goto(f"{base}/experiments/{experiment}?workflowType=machine_learning",
                          wait_until="load", timeout=120_000)
                page.wait_for_url("**/experiments/*/runs*", timeout=120_000)
                page.get_by_text(parent.info.run_name).first.wait_for(timeout=120_000)

                run_url = f"{base}/experiments/{experiment}/runs"
                page = _metric_charts(browser, f"{run_url}/{child.info.run_id}/system-metrics",
                                      "process_cpu_utilization_percentage")
                assert "process_memory_rss_megabytes" in page.inner_text("body")
                screenshot(page, tmp_path, "mlflow-system-metrics.png")

                page = _metric_charts(browser, f"{run_url}/{parent.info.run_id}/model-metrics",
                                      "loss/mean")
                assert "loss/max" in page.inner_text("body")
                screenshot(page, tmp_path, "mlflow-aggregates.png")

                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(compare_url, wait_until="load", timeout=120_000)
                page.get_by_text("rank-01 (loss)").wait_for(timeout=120_000)  # the chart legend
                page.locator(".js-plotly-plot g.trace").first.wait_for(timeout=60_000)
                assert "Comparing 2 Runs" in page.inner_text("body")
                assert page.locator(".js-plotly-plot g.trace").count() >= 2  # one curve per rank
                screenshot(page, tmp_path, "mlflow-compare.png")
            finally:
                browser.close()
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # `platform-run ui` stops its server on SIGTERM
        ui.wait(30)
        held.close()


def _metric_charts(browser, url: str, metric: str):
    """A run's metrics tab in the machine-learning view, once `metric` is shown and a chart drew."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{url}?workflowType=machine_learning", wait_until="load", timeout=120_000)
    page.get_by_text(metric).first.wait_for(timeout=120_000)
    page.locator(".js-plotly-plot g.trace").first.wait_for(timeout=60_000)
    return page
