"""The board in a real kernel shows a rank as a terminal would: a `\\r` progress bar is one line
in its last state (not one line per display flush), a 5 MB line without a newline is one
clipped line (not 77 pieces of 64 KiB in the notebook), colours leave no escape codes."""
from __future__ import annotations

import pytest

from tests.launcher.helpers import ASSETS, log_text
from tests.magic.helpers import run_cell

pytestmark = pytest.mark.slow


def test_board_tail_is_what_a_terminal_shows(kernel):
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    cell = run_cell(kc, f"%dist_run --nproc 2 --backend plain --tracking none --log-dir "
                        f"{kc.log_dir} --job-name screen python {ASSETS / 'screen_rank.py'}")
    assert cell.ok, cell.stream + "\n".join(cell.error)
    board = cell.board
    for rank in range(2):
        section = board.split(f"-- rank {rank} (4 lines) --\n")[1].split("\n--")[0].splitlines()
        assert [line.strip()[:12] for line in section] == [
            "red error bo", "xxxxxxxxxxxx", "training: 10", "rank done"], section
        assert section[2].strip() == "training: 100%|" + "#" * 25
        assert len(section[1].strip()) <= 4096
    html = cell.displays[-1][1]["text/html"]
    assert "\x1b" not in board + html and "[31m" not in board + html
    assert len(html) < 40_000, len(html)  # the notebook keeps the board: no megabytes in it
    job = next(d for d in kc.log_dir.iterdir() if d.name.startswith("screen"))
    assert "\x1b[31mred error" in log_text(str(job), "0")  # the log keeps every byte
