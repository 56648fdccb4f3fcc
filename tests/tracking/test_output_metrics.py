"""Metrics read from the ranks' lines (tracking/job/output_metrics.py): MindSpore's callback
formats of every version, a user's regex, lines cut across chunks, and the rank's own tracker
winning for a name it logs itself (a real spool file, written as the rank's tracker writes it)."""
from __future__ import annotations

import json
import time

import pytest

from platform_plugin.tracking.job import output_metrics as om
from platform_plugin.tracking.job.output_metrics import (BUILT_IN, OutputMetrics, RankLines,
                                                         patterns_for, regex_problem)
from platform_plugin.tracking.rank.spool import encode_metric, read_complete


def parsed(text: bytes, patterns=BUILT_IN, pieces: int = 1) -> list[tuple[str, float, int]]:
    """(name, value, step) of every point read from `text`, fed in `pieces` chunks."""
    lines = RankLines(patterns)
    size = max(1, len(text) // pieces)
    for at in range(0, len(text), size):
        chunk = text[at:at + size]
        lines.scan(chunk, chunk.rfind(b"\n") + 1)
    lines.end()
    return [(name, value, step) for name, value, step, *_ in lines.pending]


def test_mindspore_2_loss_and_time_monitor_lines():
    out = b"".join(b"epoch: %d step: %d, loss is %.4f\n" % (epoch, step, 1 / (epoch * 10 + step))
                   for epoch in (1, 2) for step in range(1, 5))
    out += b"Train epoch time: 1234.500 ms, per step time: 12.345 ms (data time: 0.100 ms)\n"
    points = parsed(out)
    losses = [p for p in points if p[0] == "loss"]
    # the job-wide step, as MetricsCallback counts it: epoch 2 continues after epoch 1's 4 steps
    assert [p[2] for p in losses] == list(range(1, 9))
    assert losses[0][1] == pytest.approx(1 / 11, abs=1e-4)
    # TimeMonitor's line at the epoch LossMonitor printed last, in seconds
    assert ("epoch_time_s", pytest.approx(1.2345), 2) in points
    assert ("step_time_s", pytest.approx(0.012345), 2) in points


def test_mindspore_1x_and_model_zoo_lines():
    out = (b"epoch: 1 step: 1875, loss is 2.3025851\n"  # 1.x LossMonitor
           b"epoch time: 80152.183 ms, per step time: 42.748 ms\n"  # 1.x TimeMonitor
           b"Epoch time: 80152.183, per step time: 42.748\n"  # 0.x / model zoo: no unit
           b"epoch: 2, step: 3, loss is Tensor(shape=[], dtype=Float32, value= 0.5)\n"
           b"epoch: 3 step: 1, loss is [0.25]\n")
    points = parsed(out)
    assert [p for p in points if p[0] == "loss"] == [
        ("loss", pytest.approx(2.3025851), 1875), ("loss", 0.5, 1878), ("loss", 0.25, 1875 * 2 + 1)]
    assert [p[2] for p in points if p[0] == "step_time_s"] == [1, 1]  # epoch 1 both times


def test_a_line_cut_across_chunks_is_read_once_whole():
    out = b"".join(b"noise %d\nepoch: 1 step: %d, loss is 0.%d\n" % (i, i, i) for i in range(1, 40))
    whole = parsed(out)
    assert len(whole) == 39
    for pieces in (3, 7, 50, len(out)):  # down to one byte per chunk
        assert parsed(out, pieces=pieces) == whole


def test_user_regex_named_groups_and_its_step():
    pattern = patterns_for(r"step (?P<step>\d+) loss[: ]+(?P<loss>[0-9.eE+-]+) acc=(?P<acc>[0-9.]+)")
    out = b"step 10 loss: 0.5 acc=0.9\nstep 20 loss 2e-1 acc=0.95\nloss: 7\n"
    assert parsed(out, pattern) == [("loss", 0.5, 10), ("acc", 0.9, 10), ("loss", 0.2, 20),
                                    ("acc", 0.95, 20)]
    # no step group: a counter per name, as the tracker's (0, 1, 2, ...)
    counted = patterns_for(r"loss[: ]+(?P<loss>[0-9.eE+-]+)")
    assert parsed(b"loss: 3\nloss 2\nx\nloss: 1\n", counted) == [
        ("loss", 3.0, 0), ("loss", 2.0, 1), ("loss", 1.0, 2)]


def test_a_match_never_spans_two_lines():
    pattern = patterns_for(r"loss\s+(?P<loss>\d+)")
    assert parsed(b"loss\n5\nloss 6\n", pattern) == [("loss", 6.0, 0)]


def test_the_users_pattern_wins_on_a_line_the_built_in_reads_too():
    pattern = patterns_for(r"loss is (?P<loss>\d+)\.")
    assert parsed(b"epoch: 1 step: 1, loss is 2.5\n", pattern) == [("loss", 2.0, 0)]


def test_none_switches_parsing_off_and_bad_patterns_are_said():
    assert patterns_for("none") == () and patterns_for(None) == BUILT_IN
    assert regex_problem("loss (?P<loss>[0-9") .startswith("not a regular expression")
    assert "named group" in regex_problem(r"loss: ([0-9.]+)")
    assert regex_problem(r"loss: (?P<loss>[0-9.]+)") is None


def _own_line(name: str, value: float, step: int) -> str:
    return encode_metric(json.dumps(name), value, step, int(time.time() * 1000))


def test_the_ranks_own_metric_wins_and_the_others_are_written(tmp_path, monkeypatch):
    monkeypatch.setattr(om, "HOLD_S", 0.0)
    spool = tmp_path / "rank_0.jsonl"
    metrics = OutputMetrics(str(tmp_path), BUILT_IN, {"0": "0"})
    lines = metrics.rank("0")
    assert metrics.rank("sched") is None  # no rank: nothing read from its lines
    # the rank logs `loss` itself (its tracker's spelling), and prints LossMonitor's lines too
    spool.write_text(_own_line("loss", 0.9, 1))
    text = b"epoch: 1 step: 1, loss is 0.9\nTrain epoch time: 10.0 ms, per step time: 5.0 ms\n"
    lines.scan(text, len(text))
    metrics.tick()
    text = b"epoch: 1 step: 2, loss is 0.8\n"
    lines.scan(text, len(text))
    metrics.close()
    records = [r for r, _ in read_complete(spool, 0).records]
    assert [r[1] for r in records].count("loss") == 1  # the rank's own, not doubled
    assert ["m", "step_time_s", 0.005, 1] == records[-1][:4]
    assert metrics.written() == 2  # epoch_time_s and step_time_s


def test_parsed_points_wait_for_the_ranks_own(tmp_path):
    """A parsed point is held HOLD_S: the rank's own point of the same step, flushed later
    than the line was printed, still wins."""
    spool = tmp_path / "rank_1.jsonl"
    metrics = OutputMetrics(str(tmp_path), BUILT_IN, {"1": "1"})
    lines = metrics.rank("1")
    text = b"epoch: 1 step: 1, loss is 0.9\n"
    lines.scan(text, len(text))
    metrics.tick()  # not yet due
    assert not spool.exists()
    spool.write_text(_own_line("loss", 0.9, 1))  # the rank's flush, 0.2 s later
    metrics.close()
    assert len(read_complete(spool, 0).records) == 1 and metrics.written() == 0


def test_the_parser_process_skips_what_a_gap_cut_and_counts_it(tmp_path):
    """After chunks the parser was not given (it was behind), the carried start of a line and
    the rest of the line the gap cut are no line: not read as one, and not counted as parsed."""
    from platform_plugin.tracking.job.parse_process import Parser
    parser = Parser({"spool_dir": str(tmp_path), "pattern": r"loss: (?P<loss>\d+)", "labels": ["0"]})
    parser.frame(b"D", 0, b"loss: 1\nloss: 4", 8, 1000)
    parser.frame(b"G", 0, b"2\nloss: 3\n", 10, 2000)  # '4' + (gap) + '2' would read 42
    assert [(n, v, s, ms) for n, v, s, ms, _ in parser.spools[0].lines.pending] == [
        ("loss", 1.0, 0, 1000), ("loss", 3.0, 1, 2000)]
    assert parser.parsed == 2  # the line the gap cut is not parsed


def test_the_parser_process_writes_the_points_and_says_nothing_when_it_kept_up(tmp_path):
    from platform_plugin.tracking.job.parse_process import ParseProcess
    reader = ParseProcess(str(tmp_path), r"it (?P<step>\d+) loss: (?P<loss>[0-9.]+)",
                          {"0": "0", "1": "1"})
    for name in ("0", "1"):
        feed = reader.rank(name)
        assert feed is not None
        text = "".join(f"it {step} loss: {int(name) + step}\n" for step in range(3)).encode()
        feed.scan(text[:10], 0)
        feed.scan(text[10:], len(text) - 10)
    assert reader.rank("scheduler") is None
    assert reader.close() == "" and reader.process.returncode == 0 and reader.lost_lines() == 0
    for rank in (0, 1):
        records = read_complete(tmp_path / f"rank_{rank}.jsonl", 0).records
        assert [(r[1], r[2], r[3]) for r, _ in records] == [("loss", rank + s, s) for s in range(3)]


def test_one_search_finds_every_monitor_line_and_no_progress_bar():
    """The monitors' lines are found by one search (MONITOR_LINE), every variant of both; a
    progress bar's `Epoch 1:` and a plain `loss is` line are no hit."""
    for line in (b"epoch: 1 step: 1875, loss is 2.3025851", b"epoch: 2, step: 3, loss is [0.5]",
                 b"epoch time: 80152.183 ms, per step time: 42.748 ms",
                 b"Epoch time: 80152.183, per step time: 42.748",
                 b"Train epoch time: 1234.500 ms, per step time: 12.345 ms (data time: 0.1 ms)"):
        assert om.MONITOR_LINE.search(line), line
        assert any(p.regex.search(line) for p in BUILT_IN), line
    for line in (b"\rEpoch 1:  49%|####      | 49/200 [00:01<00:02, 812.34it/s]",
                 b"step 3 loss is 0.5", b"[INFO] epoch 3 done, loss=0.5"):
        assert om.MONITOR_LINE.search(line) is None, line


def test_a_job_resumed_at_a_later_epoch_keeps_its_job_wide_steps():
    """A script that resumed from its own snapshot prints epoch 3 first: its steps are placed
    once the epoch's length is known (epoch 3 ends), not counted from 1 again."""
    out = b"".join(b"epoch: %d step: %d, loss is 0.%d%d\n" % (epoch, step, epoch, step)
                   for epoch in (3, 4) for step in range(1, 5))
    for pieces in (1, 5):
        losses = [(v, s) for n, v, s in parsed(out, pieces=pieces) if n == "loss"]
        assert losses == [(float(f"0.{e}{s}"), (e - 1) * 4 + s) for e in (3, 4) for s in range(1, 5)]
    # the output ends inside the resumed epoch: the steps it printed give its length
    cut = b"epoch: 3 step: 1, loss is 0.5\nepoch: 3 step: 2, loss is 0.25\n"
    assert parsed(cut) == [("loss", 0.5, 5), ("loss", 0.25, 6)]
