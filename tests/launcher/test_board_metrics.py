"""The board's metrics column: which metrics (the most logged, a throughput last, or
--board-metrics) and how they fit its width (long names shortened, never the throughput out)."""
from __future__ import annotations

from platform_plugin.launcher.display.board_render import (METRIC_CHARS, BoardView, RankRow,
                                                           choose_metrics, metrics_text,
                                                           render_text)

LONG = {"validation_accuracy_top5_over_all_batches": 0.91234, "epoch_mean_training_loss": 0.12345,
        "learning_rate_after_warmup": 0.05, "samples_per_s": 812.4}


def test_the_most_logged_metrics_come_first_and_a_throughput_last():
    rank0 = {"samples_per_s": 40, "loss": 40, "lr": 2, "epoch_loss": 2, "acc": 10, "grad_norm": 40}
    rank1 = dict(rank0)
    assert choose_metrics([rank0, rank1]) == ["loss", "grad_norm", "acc", "samples_per_s"]
    # no throughput: four of the others; ties keep the order the metrics were first logged
    assert choose_metrics([{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}]) == ["a", "b", "c", "d"]
    # `samples/s` or `tokens_per_sec` count as the throughput too
    assert choose_metrics([{"samples/s": 9, "loss": 1}]) == ["loss", "samples/s"]
    # the user's choice, as given, whatever was logged
    assert choose_metrics([rank0], ("acc", "loss")) == ["acc", "loss"]


def test_long_names_are_shortened_before_any_metric_is_left_out():
    names = choose_metrics([{name: 1 for name in LONG}])
    text = metrics_text(LONG, names)
    assert len(text) <= METRIC_CHARS, text
    assert text.endswith("samples_per_s=812.4"), text  # the throughput stays, whole
    assert "=0.1235" in text and "=0.9123" in text, text  # the others' values stay readable
    assert "…" in text  # their names were shortened in the middle


def test_too_many_metrics_leave_out_the_least_logged_never_the_throughput():
    values = {f"metric_number_{i}": float(i) for i in range(12)} | {"samples_per_s": 9.5}
    text = metrics_text(values, list(values))
    assert len(text) <= METRIC_CHARS and text.endswith("samples_per_s=9.5"), text
    assert text.startswith("metr…") or text.startswith("metric"), text


def test_every_row_shows_the_same_metrics_in_the_same_order():
    rows = [RankRow(str(r), "running", 3.0, step=7, metrics=dict(LONG)) for r in range(2)]
    view = BoardView("job", rows, metric_names=choose_metrics([{n: 1 for n in LONG}]))
    lines = [line for line in render_text(view).splitlines() if line.strip().startswith("rank ")]
    assert len(lines) == 2 and all("samples_per_s=812.4" in line for line in lines), lines
    assert lines[0].split("rank 0", 1)[1] == lines[1].split("rank 1", 1)[1]
