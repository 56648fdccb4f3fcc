"""The board's curves (launcher/display/sparkline.py): a diverging series looks different from a
converging one in text and in SVG, a stalled rank ends short of the others, memory stays bounded,
and every row of the board gets its curve."""
from __future__ import annotations

import math
import re
import sys

import pytest

from platform_plugin.launcher import launch
from platform_plugin.launcher.jobs.follow import JobFollower
from platform_plugin.launcher.display.board_render import BoardView, RankRow, render_html, render_text
from platform_plugin.launcher.display.sparkline import (BLOCKS, MAX_POINTS, Curve, sparkline,
                                                        svg_sparkline)
from platform_plugin.launcher.display.spool_tail import RankMetrics


def curve(values, start: int = 1) -> list[tuple[int, float]]:
    c = Curve()
    for step, value in enumerate(values, start):
        c.add(step, value)
    return c.values()


CONVERGING = curve([4 / math.sqrt(s) for s in range(1, 201)])
DIVERGING = curve([0.5 + (s / 60) ** 2 for s in range(1, 201)])


def heights(text: str) -> list[int]:
    return [BLOCKS.index(ch) for ch in text]


def test_a_converging_curve_falls_and_a_diverging_one_rises():
    down, up = sparkline(CONVERGING), sparkline(DIVERGING)
    assert len(down) == len(up) == 16
    # a column is the mean of its points: high to the floor, the floor to the top
    assert heights(down)[0] >= 4 and heights(down)[-1] == 0, down
    assert heights(up)[0] == 0 and heights(up)[-1] >= 6, up
    assert heights(down) == sorted(heights(down), reverse=True)
    assert heights(up) == sorted(heights(up))


def _path(svg: str) -> list[tuple[float, float]]:
    d = re.search(r"<path d='([^']+)'", svg).group(1)
    return [tuple(map(float, p.split(","))) for p in d[1:].split(" L")]


def test_the_svg_path_goes_down_for_a_converging_loss_and_up_in_red_for_a_diverging_one():
    down, up = svg_sparkline(CONVERGING), svg_sparkline(DIVERGING)
    # SVG's y grows downwards: a falling loss ends lower on the page's y axis = a larger y
    falling, rising = _path(down), _path(up)
    assert falling[0][1] < falling[-1][1] and rising[0][1] > rising[-1][1]
    assert falling[0][0] < falling[-1][0] and rising[0][0] < rising[-1][0]  # left to right
    assert "class='curve falling'" in down and "#1565c0" in down
    assert "class='curve rising'" in up and "#c62828" in up
    # an accuracy going up is the good direction: not red
    assert "#c62828" not in svg_sparkline(DIVERGING, lower_is_better=False)


def test_a_stalled_rank_ends_short_of_the_others():
    stalled = curve([4 / math.sqrt(s) for s in range(1, 51)])  # stopped at step 50 of 200
    assert len(sparkline(stalled, last_step=200)) < len(sparkline(CONVERGING, last_step=200)) // 2
    assert _path(svg_sparkline(stalled, last_step=200))[-1][0] < 40  # of 120 pixels


def test_memory_is_bounded_and_the_shape_kept():
    c = Curve()
    for step in range(1, 1_000_001):
        c.add(step, 1 / step)
    points = c.values()
    assert len(points) <= MAX_POINTS + 1 and c.stride >= 1_000_000 // MAX_POINTS
    assert points[-1][0] >= 1_000_000 - c.stride and points[0][1] > points[-1][1]
    steps = [s for s, _ in points]
    assert steps == sorted(steps)


def test_nan_and_a_single_point_draw_without_error():
    assert sparkline([]) == "" and svg_sparkline([]) == ""
    assert len(sparkline(curve([1.0]))) == 1
    assert "rising" in svg_sparkline(curve([1.0, 0.5, float("nan")]))  # a NaN loss: bad news
    assert sparkline(curve([2.0, 2.0, 2.0])) == BLOCKS[4] * 16  # flat: the middle


def test_the_main_metric_is_loss_else_the_first_logged():
    metrics = RankMetrics()
    metrics.add("acc", 0.5, 1, 1000)
    metrics.add("lr", 0.1, 1, 1000)
    assert metrics.main == "acc" and set(metrics.curves) == {"acc"}
    metrics.add("loss", 2.0, 1, 1000)
    assert metrics.main == "loss" and set(metrics.curves) == {"acc", "loss"}


def test_every_row_of_the_board_draws_its_curve():
    rows = [RankRow("0", "running", 3.0, step=200, curve_name="loss", curve=CONVERGING),
            RankRow("1", "running", 3.0, step=200, curve_name="loss", curve=DIVERGING),
            RankRow("sched", "running", 3.0)]
    view = BoardView("job", rows)
    html = render_html(view)
    assert html.count("<svg class='curve") == 2
    assert html.count("class='curve rising'") == 1 and "rank 1: loss" in html  # its tooltip
    text = render_text(view)
    row0 = next(line for line in text.splitlines() if line.strip().startswith("rank 0"))
    row1 = next(line for line in text.splitlines() if line.strip().startswith("rank 1"))
    assert sparkline(CONVERGING, 200) in row0 and sparkline(DIVERGING, 200) in row1


DIVERGING_RANK = """
import os
rank = int(os.environ["RANK_ID"])
for step in range(1, 41):
    loss = 4.0 / step if rank == 0 else 0.5 + step * step / 100
    print(f"epoch: 1 step: {step}, loss is {loss}", flush=True)
"""


@pytest.mark.slow
def test_a_real_jobs_board_from_its_folder_draws_one_curve_per_rank(clean_environ, tmp_path):
    """A real 2-rank job that only prints LossMonitor's lines (read into each rank's spool):
    the board made from its folder (what a background job's board and attach show) draws a
    curve in each rank's row, rank 1's rising, rank 0's falling."""
    clean_environ.chdir(tmp_path)  # the job's MLflow store: ./mlflow.db
    clean_environ.setenv("PLATFORM_LOG_DIR", str(tmp_path / "platform_logs"))
    (tmp_path / "train.py").write_text(DIVERGING_RANK)
    result = launch([sys.executable, "train.py"], nproc=2, backend="plain", cwd=str(tmp_path),
                    write=lambda text: None, no_system_metrics=True)
    assert result.ok
    follower = JobFollower(result.job_dir)
    follower.refresh()
    view = follower.view(final=True)
    rows = {row.name: row for row in view.rows}
    assert [len(rows[r].curve) for r in "01"] == [40, 40] and rows["0"].curve_name == "loss"
    html = render_html(view)
    assert re.findall(r"<svg class='curve (\w+)'", html) == ["falling", "rising"]
    text = render_text(view)
    assert sparkline(rows["1"].curve, 40) in text and sparkline(rows["0"].curve, 40) in text


def test_the_board_reads_its_attempts_own_spools(tmp_path):
    """Attempt 1's spools are `tracking/`, a restarted attempt K's `tracking-attempt-K/`."""
    from platform_plugin.launcher.display.spool_tail import SpoolTail
    from platform_plugin.tracking.shared.job_folders import spool_folder_name
    for attempt, loss in ((1, 3.0), (2, 1.5)):
        folder = tmp_path / spool_folder_name(attempt)
        folder.mkdir()
        (folder / "rank_0.jsonl").write_text(f'["m","loss",{loss},1,1000]\n')
    for attempt, loss in ((1, 3.0), (2, 1.5)):
        tail = SpoolTail(str(tmp_path), attempt)
        tail.refresh(["0"])
        assert tail.metrics["0"].values == {"loss": loss}
