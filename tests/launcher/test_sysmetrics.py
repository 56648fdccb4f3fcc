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
            steps = [p.step for p in points]  # sample numbers: one the rank had ended for is not its
            assert steps[0] == 0 and steps == sorted(set(steps)), (name, steps)
            # never sampled faster than the interval while the job runs (the job's end takes
            # one more, whenever it comes)
            running = points if name in PROCESS else points[:-1]
            gaps = [b.timestamp - a.timestamp for a, b in zip(running, running[1:])]
            assert min(gaps) >= 495, (name, gaps)
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


SHORT = """
import os, time
keep = bytearray(50 << 20) if os.environ["RANK_ID"] == "1" else b""
time.sleep(1.0)
"""


def test_a_job_shorter_than_the_interval_still_gets_a_sample_at_its_start_and_end(tracking_env,
                                                                                  tmp_path):
    """Before, the first sample came after one interval (5 s by default): a shorter job (a quick
    try, a failing cell) had no system metrics at all."""
    (tmp_path / "short.py").write_text(SHORT)
    quiet = {"write": lambda text: None, "cwd": str(tmp_path), "nproc": 2}
    result = launch([sys.executable, "short.py"], system_metrics_interval=30, **quiet)
    assert result.tracking.wait_ended()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    rss = {}
    for rank, run in enumerate(child_runs(c, result.tracking.parent_run_id)):
        for name in MACHINE:  # at the start and at the end
            assert [p.step for p in c.get_metric_history(run.info.run_id, f"system/{name}")] \
                == [0, 1], name
        for name in PROCESS:  # while the rank ran: the start's sample
            assert len(c.get_metric_history(run.info.run_id, f"system/{name}")) == 1, name
        rss[rank] = run.data.metrics["system/process_memory_rss_megabytes"]
    assert rss[1] > rss[0] + 40  # rank 1's 50 MB, seen by the sample at its start
    # a rank of a few milliseconds: the end's sample of the machine, no process values
    instant = launch([sys.executable, "-c", "pass"], system_metrics_interval=30, **quiet)
    # nothing of the ranks' own: the launcher does not wait for MLflow, nor offers a compare
    hint = instant.tracking.ui_hint
    assert "compare ranks" not in hint and (instant.tracking.pending == 0
                                            or "points go to the store in the background" in hint)
    assert instant.tracking.wait_ended()
    for run in child_runs(c, instant.tracking.parent_run_id):
        assert "system/cpu_utilization_percentage" in run.data.metrics
