"""A background job in real JupyterLab 4 and Chromium: `%dist_run --background` returns at once
with a live board, the page is reloaded mid-job, `%dist_attach` in a new cell shows a board that
keeps moving and then the result, and a second notebook's `%dist_jobs` lists the job while it
runs. Screenshots go to the test's tmp folder (docs/ with UPDATE_SCREENSHOTS=1)."""
from __future__ import annotations

import os
import re

import pytest

from tests.helpers import REPO, wait_for
from tests.jupyterlab.test_lab import kernel_ready, output_text, run_cell
from tests.launcher.helpers import wait_no_processes
from tests.notebook.helpers import IPYKERNEL, make_notebook

pytestmark = pytest.mark.slow
SHOTS = {"background": "notebook-background.png", "attached": "notebook-attach.png",
         "ended": "notebook-attach-ended.png", "jobs": "notebook-jobs.png"}
JOB = re.compile(r"job (bgjob-\d{8}-\d{6}-[0-9a-f]{4}) runs in the background")
# The job runs until the test releases it (not for a fixed time: under load the reload, a second
# kernel's start and the attach took longer than a 60 s job ran, and the job had ended before
# the test looked for it running), then it finishes.
HELD_RANK = """
import os, sys, time
rank, release = os.environ["RANK_ID"], sys.argv[1]
for step in range(4000):  # about 17 minutes at most: a test that died releases nothing
    if os.path.exists(release):
        break
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.25)
print(f"rank {rank} finished", flush=True)
"""


def shot_path(tmp_path, name: str):
    folder = REPO / "docs" if os.environ.get("UPDATE_SCREENSHOTS") == "1" else tmp_path
    return folder / SHOTS[name]


def open_notebook(browser, lab, name: str, cells: int):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(lab.notebook_url(name), wait_until="load", timeout=120_000)
    page.locator(".jp-Notebook .jp-Cell").nth(cells - 1).wait_for(timeout=120_000)
    kernel_ready(page)
    return page


def changes(read, seconds: float = 60) -> tuple[str, str]:
    """Two different values of `read()` (the board moved), or the test fails."""
    first = read()
    second = wait_for(lambda: (text := read()) != first and text, seconds, interval=0.5,
                      what="the board to move")
    return first, second


def test_background_job_reload_attach_and_a_second_notebook(lab, browser, tmp_path):
    (lab.root / "held_rank.py").write_text(HELD_RANK)
    release = lab.root / "release"
    make_notebook(lab.root / "background.ipynb", display_name=IPYKERNEL, cells=[
        "%load_ext platform_plugin",
        "%dist_run --background --nproc 2 --backend plain --tracking none --grace 1 "
        f"--job-name bgjob python held_rank.py {release}",
        "print('the kernel is free')",
        "%dist_attach",
    ])
    make_notebook(lab.root / "second.ipynb", ["%load_ext platform_plugin", "%dist_jobs"],
                  display_name=IPYKERNEL)
    page = open_notebook(browser, lab, "background.ipynb", 4)
    cells = page.locator(".jp-Notebook .jp-Cell")
    run_cell(page, 0)
    run_cell(page, 1)
    wait_for(lambda: JOB.search(output_text(page, 1)), 120, what="the job id")
    job_id = JOB.search(output_text(page, 1)).group(1)
    board = cells.nth(1).locator(".jp-OutputArea table")
    board.wait_for(timeout=120_000)
    run_cell(page, 2)  # the cell returned: the kernel runs the next one while the job runs
    wait_for(lambda: "the kernel is free" in output_text(page, 2), 60, what="the next cell")
    changes(board.inner_text)  # the board in the starting cell moves, its cell long done
    page.screenshot(path=str(shot_path(tmp_path, "background")))
    second = open_notebook(browser, lab, "second.ipynb", 2)  # its kernel starts meanwhile
    run_cell(second, 0)

    saved = lab.root / "background.ipynb"  # as JupyterLab's autosave would, before the reload

    def save() -> bool:
        page.keyboard.press("Control+s")
        return "after a page reload this board stops moving" in saved.read_text()
    wait_for(save, 60, interval=2, what="the notebook saved with its outputs")
    page.reload(wait_until="load", timeout=120_000)
    cells = page.locator(".jp-Notebook .jp-Cell")
    cells.nth(3).wait_for(timeout=120_000)
    kernel_ready(page)
    # the reloaded page shows the saved board, which no longer moves, under the way back
    assert f"`%dist_attach {job_id}` in a new cell follows the job again" in \
        output_text(page, 1)
    run_cell(page, 3)
    attached = cells.nth(3).locator(".jp-OutputArea table")
    attached.wait_for(timeout=120_000)
    before, after = changes(lambda: output_text(page, 3))
    assert job_id in after and "running" in after, after
    cells.nth(3).scroll_into_view_if_needed()
    page.screenshot(path=str(shot_path(tmp_path, "attached")))

    run_cell(second, 1)
    wait_for(lambda: job_id in output_text(second, 1), 120, what="the job in %dist_jobs")
    listed = output_text(second, 1)
    row = next(line for line in listed.splitlines() if job_id in line)
    assert "running" in row and "bgjob" in row, listed
    second.screenshot(path=str(shot_path(tmp_path, "jobs")))
    second.close()

    assert "succeeded" not in output_text(page, 3)  # held until now
    release.touch()
    wait_for(lambda: "succeeded" in output_text(page, 3), 240, what="the job's end")
    ended = output_text(page, 3)
    assert f"job {job_id} succeeded" in ended and "rank 1 finished" in ended, ended
    cells.nth(3).scroll_into_view_if_needed()
    page.screenshot(path=str(shot_path(tmp_path, "ended")))
    assert not wait_no_processes(str(lab.root / "platform_logs" / job_id))
    page.close()
