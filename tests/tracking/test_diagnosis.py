"""Why a straggler is slow: from the launcher's system metrics of a real job (memory), and the
rules on numbers (CPU starved only when the machine was saturated)."""
from __future__ import annotations

import sys

import pytest

from platform_plugin.cli import main
from platform_plugin.launcher import launch
from platform_plugin.comparison.table import Point, rank_rows
from platform_plugin.comparison.diagnosis import CPU, MACHINE_CPU, MACHINE_MEMORY, RSS, straggler_reasons


def rows_with_straggler():
    series = {str(r): [Point(s, 1.0, int(1000 * s * (0.3 if r == 2 else 0.1))) for s in range(20)]
              for r in range(3)}
    rows = rank_rows(series, "loss")
    assert rows[2].flags == ["straggler"]
    return rows


def system(cpu, machine, memory=50.0, rss=(500.0, 500.0, 500.0)):
    return {str(r): {CPU: cpu[r], MACHINE_CPU: machine, MACHINE_MEMORY: memory, RSS: rss[r]} for r in range(3)}


def test_cpu_starved_only_when_the_machine_was_saturated():
    rows = rows_with_straggler()
    starved = straggler_reasons(rows[2], rows, system((98, 97, 40), machine=99))
    assert starved[0].startswith("its pace 3.333 vs the median 10 (-67%)")
    assert "CPU starved: its processes got 40% CPU vs 98% for the other ranks while the machine ran at 99%" in starved
    waiting = straggler_reasons(rows[2], rows, system((98, 97, 40), machine=60))
    assert not any("CPU" in r for r in waiting)  # idle CPU: it waits (I/O, a lock), not starved
    memory = straggler_reasons(rows[2], rows, system((98, 97, 98), machine=60, memory=95, rss=(500, 510, 900)))
    assert "memory pressure: the machine's memory reached 95%" in memory
    assert "memory: its RSS peaked at 900 MB vs 505 MB for the other ranks" in memory
    assert straggler_reasons(rows[2], rows, {}) == [starved[0]]  # no system metrics: only the pace


RANK = """
import os, time
from platform_plugin import tracking
t = tracking.get_tracker()
slow = os.environ["RANK_ID"] == "2"
hoard = [bytearray(1 << 20) for _ in range(400 if slow else 0)]  # the straggler also hoards memory
for step in range(30):
    time.sleep(0.12 if slow else 0.02)
    t.log_metric("loss", 1.0 / (step + 1), step=step)
"""


@pytest.mark.slow
def test_compare_says_why_the_straggler_is_slow_from_the_jobs_system_metrics(tracking_env, tmp_path, capsys):
    (tmp_path / "rank.py").write_text(RANK)
    result = launch([sys.executable, "rank.py"], nproc=3, cwd=str(tmp_path), system_metrics_interval=0.3,
                    write=lambda text: None)
    assert result.tracking.wait_ended()
    assert main(["compare"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("straggler rank-02: "))
    assert "its pace" in line and "vs the median" in line
    assert "memory: its RSS peaked at" in line
