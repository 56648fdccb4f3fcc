"""The first seconds of a job: ranks importing torch or MindSpore print nothing for seconds.
The display says they started and what they most likely wait for - a line in a terminal, a
note on the board that goes once a rank writes."""
from __future__ import annotations

import re

import pytest

from platform_plugin.launcher import launch
from platform_plugin.launcher.display import output
from platform_plugin.launcher.display.board import Board
from tests.launcher.helpers import PY

QUIET = "have printed nothing yet: most often they are importing their framework"


def test_the_board_says_what_silent_ranks_wait_for_until_one_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(output, "QUIET_START_S", 0.0)  # (3 s in a job)
    bundles: list[dict] = []
    board = Board(bundles.append, refresh_s=0)
    board.open("0", str(tmp_path / "rank_0.log"))
    board.flush()
    assert QUIET in bundles[-1]["text/plain"] and QUIET in bundles[-1]["text/html"]
    assert "rendezvous (init_process_group, init())" in bundles[-1]["text/plain"]
    board.feed("0", b"epoch 1\n")
    board.flush()
    assert QUIET not in bundles[-1]["text/plain"]  # a rank writes: the note would mislead now
    board.close()


@pytest.mark.slow
def test_a_terminal_gets_one_line_while_the_ranks_are_silent(log_dir, tmp_path, clean_environ):
    said: list[str] = []
    result = launch([PY, "-c", "import time; time.sleep(5); print('first line')"], nproc=2,
                    backend="plain", tracking="none", log_dir=str(log_dir), cwd=str(tmp_path),
                    show="all", write=said.append)
    text = "".join(said)
    assert result.ok, text
    assert text.count(QUIET) == 1 and text.index(QUIET) < text.index("first line"), text
    assert re.search(r"\[launcher\] the ranks started \d+s ago", text), text
