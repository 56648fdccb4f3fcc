"""The report of a failed `platform-run debug|full` fits the terminal as `platform-run
launch`'s table does (COLUMNS=80): the cell's lines, the JobFailed line, where the ranks were
stuck and the earlier attempts' tables were printed whole (100-150 columns wrapped into each
other). Real kernel, real `%dist_run` ranks (plain backend), two attempts."""
from __future__ import annotations

import re

import nbformat
import pytest

from platform_plugin.launcher.display.result_table import render_result
from platform_plugin.launcher.processes.jobfile import read
from platform_plugin.launcher.processes.result import JobResult
from tests.notebook.helpers import clean_env, make_notebook, platform_run

pytestmark = pytest.mark.slow

RANKS = """
import time
def wait_for_the_next_batch_from_the_shared_filesystem_of_the_cluster():
    time.sleep(60)
print("step 1", flush=True)
wait_for_the_next_batch_from_the_shared_filesystem_of_the_cluster()
"""
CELL = ("%dist_run --nproc 2 --backend plain --tracking none --timeout 3 --grace 1 --max-restarts 1 "
        "python ranks.py  # a long line of the cell: it is clipped in the report")


def _too_wide(text: str, columns: int) -> list[str]:
    """Lines wider than the terminal, but a root cause's quoted log lines and the log folder
    (whole, as in `platform-run launch`'s table)."""
    return [line for line in text.splitlines() if len(line) > columns
            and not line.startswith(("    | ", "  logs: ", "  |   logs: ", "output notebook: "))]


def test_the_failure_report_and_earlier_attempts_fit_80_columns(tmp_path):
    (tmp_path / "ranks.py").write_text(RANKS)
    make_notebook(tmp_path / "nb.ipynb", ["%load_ext platform_plugin", CELL])
    done = platform_run("debug", "nb.ipynb", "--output", "out.ipynb", cwd=tmp_path,
                        env=clean_env(COLUMNS="80"), timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    report = done.stderr[done.stderr.index("[platform-run] notebook FAILED"):]
    assert "all 2 attempts failed; the earlier ones:" in report, report
    assert _too_wide(report, 80) == [], report
    stuck = [line for line in report.splitlines() if "wait_for_the_next_batch" in line]
    assert len(stuck) == 2 and all(line.endswith("…") for line in stuck), report  # both attempts
    assert re.search(r"^  \| %dist_run --nproc 2 .*…$", report, re.M), report
    # the live cell output: the launcher's table before its restart, in the kernel
    assert _too_wide(done.stdout, 80) == [], done.stdout
    # nothing is lost: the whole line is in the job's record (and a wide terminal shows it)
    job_dir = re.search(r"logs: (\S+)", report).group(1)
    wide = render_result(JobResult.from_dict(read(job_dir)["result"]), 200)
    assert any(line.endswith("< <module> (ranks.py:6)") for line in wide.splitlines()), wide
    assert nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[-1].source == CELL
