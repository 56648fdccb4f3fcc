"""System metrics per rank, sampled by the launcher (no code in the rank), in each child run of
a real 2-rank job: process tree CPU/RSS/threads, the machine, and the rank's NPU from the
`npu-smi` STAND-IN (tests/assets/system/npu-smi prints a real 910B3 table; no NPU here)."""
from __future__ import annotations

import os
import sys

import pytest

from platform_plugin.launcher import launch
from tests.helpers import ASSETS
from tests.tracking.conftest import tracking_env  # noqa: F401 - the tracking tests' fixture
from tests.tracking.helpers import child_runs, client

pytestmark = pytest.mark.slow

RANK = """
import os, time
rank = int(os.environ["RANK_ID"])
keep = []
end = time.time() + 3
while time.time() < end:
    if rank == 1:  # a busy rank that grows: its CPU and RSS must show it
        if len(keep) < 200:
            keep.append(bytearray(1 << 20))
        sum(range(20000))
    else:
        time.sleep(0.05)
"""
PROCESS = ("process_cpu_utilization_percentage", "process_memory_rss_megabytes", "process_threads")
MACHINE = ("cpu_utilization_percentage", "system_memory_usage_megabytes", "system_memory_usage_percentage")


def test_each_child_run_gets_system_metrics_at_the_interval_and_off_means_none(tracking_env, tmp_path):
    (tmp_path / "rank.py").write_text(RANK)
    tracking_env.setenv("PATH", f"{ASSETS / 'system'}{os.pathsep}{os.environ['PATH']}")
    quiet = {"write": lambda text: None, "cwd": str(tmp_path), "nproc": 2}
    result = launch([sys.executable, "rank.py"], system_metrics_interval=0.5, **quiet)
    assert result.tracking.wait_ended()  # the forwarding helper ends the runs after launch()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    children = child_runs(c, result.tracking.parent_run_id)
    peaks = {}
    for rank, run in enumerate(children):
        history = {name: sorted(c.get_metric_history(run.info.run_id, f"system/{name}"), key=lambda m: m.step)
                   for name in PROCESS + MACHINE}
        for name, points in history.items():
            assert len(points) >= 2, name  # a 3 s rank, a sample every 0.5 s
            assert [p.step for p in points] == list(range(len(points))), name
            gaps = [b.timestamp - a.timestamp for a, b in zip(points, points[1:])]
            assert min(gaps) >= 495, (name, gaps)  # never sampled faster than the interval
        peaks[rank] = {name: max(p.value for p in points) for name, points in history.items()}
        # the rank's NPU (DEVICE_ID = rank on this CPU box) as the stand-in's table prints it
        assert run.data.metrics[f"system/npu_{rank}_utilization_percentage"] == 10 + rank
        assert run.data.metrics[f"system/npu_{rank}_hbm_usage_megabytes"] == [3318, 3314][rank]
        assert not any(k.startswith(f"system/npu_{1 - rank}_") for k in run.data.metrics)
    assert peaks[1]["process_memory_rss_megabytes"] > peaks[0]["process_memory_rss_megabytes"] + 100
    assert peaks[1]["process_cpu_utilization_percentage"] > peaks[0]["process_cpu_utilization_percentage"]
    assert peaks[0]["process_threads"] >= 1
    parent = c.get_run(result.tracking.parent_run_id).data.metrics
    assert "system/process_cpu_utilization_percentage/max" in parent
    assert not any(k.startswith("system/npu_") for k in parent)  # one card's metric: no aggregate

    off = launch([sys.executable, "rank.py"], no_system_metrics=True, **quiet)
    assert off.tracking.wait_ended()
    for run in child_runs(c, off.tracking.parent_run_id):
        assert not any(k.startswith("system/") for k in run.data.metrics)
