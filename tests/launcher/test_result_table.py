"""result_table.clip: a line fits the terminal's columns (a wide CJK character takes two, a
combining accent none) - the failure table, debug|full's report and the attempts' tables."""
from __future__ import annotations

import unicodedata

import pytest

from platform_plugin.launcher.display.result_table import clip


def columns(text: str) -> int:
    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


@pytest.mark.parametrize("line", [
    "  | " + "x" * 120, "  | # 加载数据集并开始训练" * 6, "  | 🚀 step " * 12, "  | café" * 30,
    "  | e\u0301" * 60, "  | 调试" + "x" * 100])
def test_a_clipped_line_fits_the_columns(line):
    for width in (20, 40, 80):
        out = clip(line, width)
        assert columns(out) <= width and out.endswith("…"), (width, out)
        assert line.startswith(out[:-1]) and columns(out) >= width - 2  # no more cut than needed


@pytest.mark.parametrize("line", ["  | short", "  | 短的一行", "  | " + "调" * 38])
def test_a_line_that_fits_stays_whole(line):
    assert clip(line, 80) == line and clip(line, None) == line


def test_keep_wins_over_the_width():
    assert clip("rank 0 " + "调" * 50, 10, keep=12) == "rank 0 " + "调" * 5 + "…"
