"""The cell experience in real JupyterLab 4 and Chromium: the live board of 8 ranks (long metric
names) while it runs and after, a failing job as a table without plugin frames, an interrupt that
leaves no rank, `%dist_compare`'s first call (table and chart, then its "starting the MLflow UI"
line replaced by the page), the MLflow page through the Jupyter server's own URL without the
Assistant panel over the chart, and the saved notebook reopened after its kernel was shut down
(the page's place says how to see it again: no "500 : Internal Server Error" page).
Screenshots go to the test's tmp folder (docs/ with UPDATE_SCREENSHOTS=1)."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest
import requests
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.helpers import REPO, copy_tracking_asset, mlflow_servers, wait_for
from tests.launcher.helpers import ASSETS, wait_no_processes
from tests.notebook.helpers import IPYKERNEL, make_notebook

pytestmark = pytest.mark.slow
QUEUED_OR_RUN = re.compile(r"\[[*0-9]+\]")  # a cell's prompt once it is queued, running or run
SHOTS = {"running": "notebook-board-running.png", "done": "notebook-board.png",
         "starting": "notebook-compare-starting.png", "page": "notebook-compare-mlflow.png",
         "reopened": "notebook-compare-reopened.png", "curves": "notebook-board-curves.png"}
# a rank logging metrics with long names beside loss (the board's metrics column)
LONG_NAMES_RANK = """
import sys
from platform_plugin import tracking
exec(open("board_rank.py").read().replace(
    'tracker.log_metric("loss", 1.0 / (step + 1), step=step)',
    'tracker.log_metric("loss", 1.0 / (step + 1), step=step); '
    'tracker.log_metric("validation_cross_entropy_loss_epoch_mean", 2.0 / (step + 1), step=step); '
    'tracker.log_metric("samples_per_s", 480.0 + step, step=step)'))
"""
CELLS = [
    "%load_ext platform_plugin",
    "%dist_run --nproc 8 --backend plain --job-name board python long_names_rank.py 50 0.2",
    "%dist_run --nproc 2 --backend plain --tracking none --grace 1 --job-name failing "
    "python board_rank.py 3 0 1",
    "%dist_run --nproc 2 --backend plain --tracking none --grace 1 --job-name stopped "
    "python board_rank.py 100000 0.2",
    "%dist_compare",
    "%dist_run --nproc 1 --backend plain --job-name renamed python board_rank.py 2 0",
]


def shot_path(tmp_path, name: str):
    """docs/ only on request (UPDATE_SCREENSHOTS=1): a test run leaves the repository clean."""
    folder = REPO / "docs" if os.environ.get("UPDATE_SCREENSHOTS") == "1" else tmp_path
    return folder / SHOTS[name]


def write_notebook(root):
    shutil.copy2(ASSETS / "board_rank.py", root / "board_rank.py")
    (root / "long_names_rank.py").write_text(LONG_NAMES_RANK)
    make_notebook(root / "board.ipynb", CELLS, display_name=IPYKERNEL)


def run_cell(page, index: int) -> None:
    """Select cell `index` and run it (Shift+Enter), as a user would. A freshly opened notebook
    can drop the first key press (seen once in a full suite run: no cell ran, nothing in the
    kernel): the press counts once the prompt shows the cell queued or run (`[*]`, `[n]`), and is
    repeated only if it does not - a queued cell is never run twice."""
    prompt = page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-InputArea-prompt")
    for _ in range(3):
        try:
            prompt.click()
        except PlaywrightTimeout:  # e.g. a dialog over the cells: the failure says which
            raise AssertionError(f"cell {index} could not be clicked; dialogs on the page: "
                                 f"{dialog_texts(page)}") from None
        page.keyboard.press("Shift+Enter")
        try:
            expect(prompt).to_have_text(QUEUED_OR_RUN, timeout=15_000)
            return
        except AssertionError:
            continue
    raise AssertionError(f"cell {index} did not start after 3 tries: prompt {prompt.inner_text()!r}")


def dialog_texts(page) -> list[str]:
    return [dialog.inner_text() for dialog in page.locator(".jp-Dialog").all()]


def kernel_ready(page) -> None:
    """The opened (or reloaded) notebook's kernel is idle, and no dialog covers the cells. A
    dialog JupyterLab raised while the page opened, before the test ran a cell in it (a full
    suite on a loaded machine once left one over a second notebook's cells), is printed - the
    test's captured output keeps what it said - and answered with its default button."""
    idle, dialog = page.get_by_text("Kernel status: Idle").first, page.locator(".jp-Dialog").first
    idle.or_(dialog).first.wait_for(state="attached", timeout=120_000)  # a dialog may come first
    try:
        dialog.wait_for(timeout=2_000)
    except PlaywrightTimeout:
        return
    print(f"a dialog over the opened notebook: {dialog_texts(page)}")
    dialog.locator(".jp-mod-accept").first.click()
    dialog.wait_for(state="detached", timeout=30_000)
    idle.wait_for(state="attached", timeout=120_000)


def output_text(page, index: int) -> str:
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea").inner_text()


def test_board_failure_interrupt_compare_and_proxied_ui(lab, browser, tmp_path):
    write_notebook(lab.root)
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(lab.notebook_url("board.ipynb"), wait_until="load", timeout=120_000)
    page.locator(".jp-Notebook .jp-Cell").nth(4).wait_for(timeout=120_000)
    kernel_ready(page)
    cells = page.locator(".jp-Notebook .jp-Cell")

    run_cell(page, 0)
    run_cell(page, 1)
    board = cells.nth(1).locator(".jp-OutputArea table")
    board.wait_for(timeout=120_000)
    # long metric names beside loss leave the throughput on the board (the column's choice)
    wait_for(lambda: "running" in board.inner_text() and "loss=" in board.inner_text()
             and "samples_per_s=" in board.inner_text(),
             timeout=120, what="the board with running ranks, their loss and throughput")
    cells.nth(1).scroll_into_view_if_needed()
    page.screenshot(path=str(shot_path(tmp_path, "running")))
    wait_for(lambda: "succeeded" in output_text(page, 1), timeout=180, what="the job's end")
    text = output_text(page, 1)
    for rank in range(8):
        assert f"rank {rank} finished" in text  # every rank's last line, tail kept
    assert "earlier lines in the log" in text and "[rank 0]" not in text
    assert cells.nth(1).locator(".jp-OutputArea table tr").count() == 9  # 8 ranks, one block
    page.screenshot(path=str(shot_path(tmp_path, "done")))
    box = cells.nth(1).locator(".jp-OutputArea").bounding_box()
    assert box["height"] < 1000, box  # 8 ranks fit in one screen

    run_cell(page, 2)
    wait_for(lambda: "JobFailed" in output_text(page, 2), timeout=120, what="the failure")
    failed = output_text(page, 2)
    assert "ROOT CAUSE" in failed and "rank 1 about to fail" in failed
    assert "magics/dist_run.py" not in failed and "Traceback" not in failed and 'File "' not in failed

    run_cell(page, 3)
    stopped = wait_for(lambda: [d for d in (lab.root / "platform_logs").glob("stopped-*")],
                       timeout=120, what="the long job's folder")[0]
    wait_for(lambda: "running" in output_text(page, 3), timeout=120, what="its ranks running")
    page.keyboard.press("Escape")
    page.keyboard.press("i")
    page.keyboard.press("i")  # JupyterLab's interrupt: i, i in command mode
    wait_for(lambda: "JobInterrupted" in output_text(page, 3), timeout=120, what="the interrupt")
    assert "stopped as asked" in output_text(page, 3) and "JobFailed" not in output_text(page, 3)
    assert wait_no_processes(str(stopped), timeout=10) == []

    run_cell(page, 4)
    chart = cells.nth(4).locator(".jp-OutputArea img")
    chart.wait_for(timeout=180_000)
    assert chart.bounding_box()["width"] > 300
    wait_for(lambda: "starting the MLflow UI" in output_text(page, 4) or
             cells.nth(4).locator(".jp-OutputArea iframe").count(), timeout=60,
             what="the progress line under the chart")
    if "starting the MLflow UI" in output_text(page, 4):
        cells.nth(4).scroll_into_view_if_needed()
        page.screenshot(path=str(shot_path(tmp_path, "starting")))
    compared = output_text(page, 4)  # the columns as the CLI prints them (spaces kept, left)
    assert re.search(r"^rank {4,}last loss {4,}best", compared, re.M), compared
    assert re.search(r"^rank-07 {4,}\d", compared, re.M), compared
    frame = cells.nth(4).locator(".jp-OutputArea iframe")
    frame.wait_for(timeout=240_000)
    assert "starting the MLflow UI" not in output_text(page, 4)  # replaced by the page
    link = cells.nth(4).locator(".jp-OutputArea a", has_text="MLflow: every rank's loss")
    src = link.get_attribute("href")
    assert src.startswith("/proxy/") and "#/metric?runs=" in src, src
    inside = page.frame_locator(".jp-Notebook .jp-Cell >> nth=4 >> iframe")
    inside.get_by_text("rank-07 (loss)").wait_for(timeout=120_000)  # the MLflow chart's legend
    frame.scroll_into_view_if_needed()
    page.wait_for_timeout(2_000)  # the chart's lines drawn (a settle, not a measure)
    page.screenshot(path=str(shot_path(tmp_path, "page")))
    # MLflow 3.17 opens its Assistant panel by itself on a loopback host and records it in
    # localStorage (useLocalStorage: "<key>_v<version>"); closed, it shows its button instead
    page_frame = frame.element_handle().content_frame()
    assert page_frame.evaluate("localStorage.getItem('mlflow.assistant.panelOpen_v1')") == "false"
    assert frame.bounding_box()["width"] > 900
    ui = browser.new_page(viewport={"width": 1280, "height": 800})
    ui.goto(f"{lab.url}{src.split('#')[0]}?token={lab.token}", wait_until="load", timeout=120_000)
    ui.goto(f"{lab.url}{src}", wait_until="load", timeout=120_000)
    ui.get_by_text("rank-07 (loss)").wait_for(timeout=120_000)
    ui.close()

    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    wait_for(lambda: "iframe" in (lab.root / "board.ipynb").read_text(), timeout=60,
             what="the notebook saved with the page's output")
    for kernel in requests.get(f"{lab.url}/api/kernels", params={"token": lab.token},
                               timeout=30).json():
        requests.delete(f"{lab.url}/api/kernels/{kernel['id']}", params={"token": lab.token},
                        timeout=60).raise_for_status()
    wait_for(lambda: not mlflow_servers(lab.root.parent), timeout=60, what="the kernel's MLflow UI gone")
    page.close()
    reopened = browser.new_page(viewport={"width": 1280, "height": 1000})
    reopened.goto(lab.notebook_url("board.ipynb"), wait_until="load", timeout=120_000)
    saved = reopened.locator(".jp-Notebook .jp-Cell").nth(4)
    saved.locator(".jp-OutputArea iframe").wait_for(timeout=120_000)
    gone = reopened.frame_locator(".jp-Notebook .jp-Cell >> nth=4 >> iframe")
    gone.get_by_text("The MLflow UI that showed this page is not running").wait_for(timeout=60_000)
    saved.scroll_into_view_if_needed()
    reopened.screenshot(path=str(shot_path(tmp_path, "reopened")))
    assert "Internal Server Error" not in gone.locator("body").inner_text()
    assert "%dist_compare" in gone.locator("body").inner_text()
    # the saved page asked the kernel that owned the UI, not the gone UI through the proxy
    # (which logs a ConnectionRefusedError traceback for every such request)
    assert "ConnectionRefusedError" not in (lab.root.parent / "jupyter.log").read_text(errors="replace")

    # renamed in JupyterLab after its kernel started: the job's experiment is the new name
    run_cell(reopened, 0)
    reopened.locator(".lm-MenuBar-item", has_text="File").first.click()
    reopened.get_by_text("Rename Notebook…").click()
    reopened.locator(".jp-Dialog input").fill("renamed-board.ipynb")
    reopened.keyboard.press("Enter")
    wait_for(lambda: (lab.root / "renamed-board.ipynb").exists(), timeout=60, what="the rename")
    run_cell(reopened, 5)
    wait_for(lambda: "succeeded" in output_text(reopened, 5), timeout=180, what="the job's end")
    job = next((lab.root / "platform_logs").glob("renamed-*"))
    sink = json.loads((job / "tracking" / "sink.json").read_text())
    assert sink["experiment_name"] == "renamed-board", sink["experiment_name"]
    reopened.close()


CURVE_CELLS = [
    "%load_ext platform_plugin",
    "import os; os.environ['MS_DIVERGE'] = '1'; os.environ['MS_EPOCHS'] = '3'",
    "%dist_run --nproc 2 --backend plain --job-name curves python ms_monitors.py",
]


def test_a_diverging_rank_stands_out_on_the_board(lab, browser, tmp_path):
    """A real 2-rank MindSpore job printing LossMonitor's lines (no tracking code), rank 1's
    learning rate too large: the board draws each rank's loss as a curve in its row, live and
    in the end, and rank 1's rises in red beside rank 0's falling one."""
    copy_tracking_asset("ms_monitors.py", lab.root)
    make_notebook(lab.root / "curves.ipynb", CURVE_CELLS, display_name=IPYKERNEL)
    page = browser.new_page(viewport={"width": 1280, "height": 700})
    page.goto(lab.notebook_url("curves.ipynb"), wait_until="load", timeout=120_000)
    page.locator(".jp-Notebook .jp-Cell").nth(2).wait_for(timeout=120_000)
    kernel_ready(page)
    for index in range(3):
        run_cell(page, index)
    cell = page.locator(".jp-Notebook .jp-Cell").nth(2)
    curves = cell.locator(".jp-OutputArea table svg.curve")
    # live: both rows draw their curve while the ranks run
    wait_for(lambda: curves.count() == 2 and "running" in output_text(page, 2), timeout=180,
             what="a curve in each running rank's row")
    wait_for(lambda: "succeeded" in output_text(page, 2), timeout=240, what="the job's end")
    # the cell's end (the board is redrawn once more when tracking's delivery is over)
    expect(cell.locator(".jp-InputArea-prompt")).to_have_text(re.compile(r"\[\d+\]"),
                                                               timeout=120_000)
    assert curves.count() == 2
    colours = [curves.nth(i).locator("path").evaluate("p => getComputedStyle(p).stroke")
               for i in range(2)]
    assert colours == ["rgb(21, 101, 192)", "rgb(198, 40, 40)"], colours  # blue, then red
    paths = [curves.nth(i).locator("path").get_attribute("d") for i in range(2)]
    ys = [[float(p.split(",")[1]) for p in d[1:].split(" L")] for d in paths]
    assert ys[0][-1] > ys[0][0] and ys[1][-1] < ys[1][0], ys  # SVG's y grows downwards
    boxes = [curves.nth(i).bounding_box() for i in range(2)]
    assert all(b["width"] >= 100 and b["height"] >= 15 for b in boxes), boxes  # drawn, visible
    cell.locator(".jp-OutputArea table").scroll_into_view_if_needed()
    page.screenshot(path=str(shot_path(tmp_path, "curves")))
    page.close()
