"""A chatty 8-rank job run through papermill leaves a small notebook: the board is one display
updated in place, so the saved .ipynb holds its final table, not the lines (all in the logs)."""
from __future__ import annotations

import shutil

import nbformat
import pytest

from platform_plugin.notebook.run import run_notebook
from tests.examples.helpers import apply_env, example_env
from tests.launcher.helpers import ASSETS

pytestmark = pytest.mark.slow
# 10 minutes of a chatty rank at 20 lines a second (what the old per-rank cap let through into
# the notebook): 12,000 lines, printed here as fast as the rank can.
LINES_PER_RANK = 12_000


def test_chatty_8_rank_job_leaves_a_notebook_under_200_kb(tmp_path, monkeypatch):
    apply_env(monkeypatch, example_env(tmp_path))
    shutil.copy2(ASSETS / "board_rank.py", tmp_path / "board_rank.py")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext platform_plugin"),
                nbformat.v4.new_code_cell(f"%dist_run --nproc 8 --backend plain --tracking none "
                                          f"python board_rank.py {LINES_PER_RANK} 0")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, tmp_path / "chatty.ipynb")

    result = run_notebook(tmp_path / "chatty.ipynb", "debug", live=False, cwd=str(tmp_path),
                          output=str(tmp_path / "out.ipynb"))

    assert result.ok, result.failure
    size = (tmp_path / "out.ipynb").stat().st_size
    assert size < 200_000, size
    outputs = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[-1].outputs
    board = next(o for o in outputs if o.output_type == "display_data")
    text = board.data["text/plain"]
    assert "succeeded" in text.splitlines()[0]
    for rank in range(8):  # the final table: every rank's last line and what was held back
        assert f"rank {rank} finished" in text
        assert f"({LINES_PER_RANK + 2} lines, {LINES_PER_RANK - 2} earlier lines in the log)" in text
    logs = sorted((tmp_path / "platform_logs").glob("board_rank-*/rank_*.log"))
    assert len(logs) == 8
    assert all(log.read_text().count(" step ") == LINES_PER_RANK for log in logs)
