"""The board's tail of a rank as a terminal would finally show it (screen_tail.ScreenTail)."""
from __future__ import annotations

import re

from platform_plugin.launcher.display.screen_tail import LINE_BYTES, ScreenTail


def test_a_redrawn_progress_bar_is_one_line_in_its_last_state():
    tail = ScreenTail(4)
    for percent in range(0, 101, 10):
        tail.feed(b"\repoch 1: %d%%|" % percent)
    assert tail.shown() == ["epoch 1: 100%|"]
    tail.feed(b"\n")
    tail.feed(b"done\n")
    assert tail.shown() == ["epoch 1: 100%|", "done"]
    tail.feed(b"abc\r")  # a carriage return at the end of a chunk: the next drawing replaces it
    tail.feed(b"de")
    assert tail.shown()[-1] == "de"


def test_a_huge_line_is_one_bounded_line_and_escapes_are_removed():
    tail = ScreenTail(4)
    for _ in range(80):  # 5 MB in 64 KiB chunks, no newline
        tail.feed(b"x" * 65536)
    tail.feed(b"rank 1 gives up")  # the end of a huge line is kept too
    huge = "x" * (LINE_BYTES // 2) + " … " + "x" * (LINE_BYTES // 2 - 15) + "rank 1 gives up"
    assert tail.shown() == [huge]
    tail.feed(b"\n\x1b[31mred\x1b[0m \x1b[1;32mgreen\x1b[0m\x1b[A\x07\n")
    assert tail.shown() == [huge, "red green"]


def test_only_the_last_lines_of_a_big_chunk_are_kept_and_chatter_stays_hidden():
    tail = ScreenTail(3, hide=re.compile(rb"\[WARNING\] DISTRIBUTED"))
    tail.feed(b"".join(b"line %d\n" % i for i in range(10_000)) + b"[WARNING] DISTRIBUTED x\n"
              + b"part")
    assert tail.shown() == ["line 9998", "line 9999", "part"]


def test_a_chunk_ending_in_chatter_keeps_the_ranks_real_last_lines():
    """The chunk was cut to its last lines before the chatter was dropped: a chunk ending in
    MindSpore's networking chatter left the tail (and the failure table's quote) empty."""
    from platform_plugin.launcher.display.chatter import CHATTER
    chatter = b"".join(b"[WARNING] DISTRIBUTED(7,ff,python):2026-11-30 [mindspore/ccsrc/"
                       b"distributed/cluster/topology/compute_graph_node.cc:%d] retry\n" % i
                       for i in range(30))
    tail = ScreenTail(3, hide=CHATTER)
    tail.feed(b"step 1\nValueError: bad batch\nrank 0 gives up\n" + chatter)
    assert tail.shown() == ["step 1", "ValueError: bad batch", "rank 0 gives up"]
    tail.feed(chatter[:40])  # a chatter line cut between two chunks is hidden too
    tail.feed(chatter[40:] + b"last")
    assert tail.shown() == ["ValueError: bad batch", "rank 0 gives up", "last"]


def test_counts_are_english():
    """"rank 0 (1 lines)" under every one-line rank of the board, "last 1 lines of" (seen)."""
    from platform_plugin.launcher.display.board_render import BoardView, RankRow, render_html, render_text
    view = BoardView("job", [RankRow("0", "ok", 1.0, lines=1, tail=["done"]),
                             RankRow("1", "ok", 1.0, lines=5, tail=["c", "d", "e", "f"]),
                             RankRow("2", "ok", 1.0, lines=9, tail=["f", "g", "h", "i"])])
    text, html = render_text(view), render_html(view)
    for form in (text, html):
        assert "rank 0 (1 line)" in form
        assert "rank 1 (5 lines, 1 earlier line in the log)" in form
        assert "rank 2 (9 lines, 5 earlier lines in the log)" in form


def test_colours_become_spans_and_nothing_else_leaks():
    """ANSI colours on the board's HTML tails (they were stray "[33m", then plain text)."""
    from platform_plugin.launcher.display.board_colours import to_html
    assert to_html(b"\x1b[31mred\x1b[0m \x1b[1;32mbold green\x1b[0m plain") == (
        "<span style='color:#c62828;'>red</span> <span style='color:#2e7d32;font-weight:bold'>"
        "bold green</span> plain")
    assert to_html(b"\x1b[38;5;208morange\x1b[39m <b>&\x1b[2K\x1b[A") == "orange &lt;b&gt;&amp;"
    assert to_html(b"\x1b[91mbright\x1b[m after") == "<span style='color:#e53935;'>bright</span> after"
    assert to_html(b"no escapes <i>") == "no escapes &lt;i&gt;"
