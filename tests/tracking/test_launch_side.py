"""What default tracking adds to a launch, in the launcher's process: only the small launcher
side of tracking (the spool folder, sink.json, the forwarding helper's start, end.json and the
offset files, and the system-metrics sampler on its own thread), no sink, no forwarder, no
MLflow, and no wait (nor an extra job.json write) when nothing is left to deliver."""
from __future__ import annotations

import json
import os
import sys

import pytest

from platform_plugin.tracking.job.handle import DeliveryReport, JobTracking
from tests.test_layout import loaded_by
from tests.tracking.helpers import make_plan

# what stays out of the launcher: the delivery side (the forwarder, the sinks, MLflow); the
# sampler (psutil) samples every job's ranks at their start and end, on its own thread
NOT_LOADED = ("mlflow", "platform_plugin.tracking.delivery.forwarder",
              "platform_plugin.tracking.sinks")


@pytest.mark.slow  # the forwarding helper it starts imports MLflow once the job ended
def test_a_tracked_launch_loads_only_the_launcher_side_of_tracking(tmp_path):
    argv = ["launch", "--nproc", "2", "--backend", "plain", "--show", "none", "--log-dir",
            str(tmp_path / "logs"), "--", sys.executable, "-c", "pass"]
    code = ("import os, sys\nsys.stdout = open(os.devnull, 'w')\n"
            f"os.environ['MLFLOW_TRACKING_URI'] = {'sqlite:///' + str(tmp_path / 'mlflow.db')!r}\n"
            f"from platform_plugin.cli import main\nassert main({argv!r}) == 0\n"
            "sys.stdout = sys.__stdout__")
    try:
        assert loaded_by(code, prefixes=NOT_LOADED) == []
    finally:  # the launch's helper creates and ends its runs: let it finish here
        for spool in (tmp_path / "logs").glob("*/tracking"):
            assert DeliveryReport(spool_dir=str(spool)).wait_ended(300)
    job = json.loads(next((tmp_path / "logs").glob("*/job.json")).read_text())
    assert job["state"] == "ended" and job["result"]["tracking"]["sink"] == "mlflow"
    # the ranks logged nothing: their spools hold the launcher's system samples only
    spools = [p for p in (tmp_path / "logs").glob("*/tracking/*") if p.name.endswith(".jsonl")]
    records = [json.loads(line) for p in spools for line in p.read_text().splitlines()]
    assert len(spools) == 2 and records and all(r[1].startswith("system/") for r in records)


class Ended:  # what finish() reads of a JobResult
    ok = True


def test_a_job_with_nothing_to_deliver_is_not_waited_for(tracking_env, tmp_path):
    """...and its report still names the experiment its runs are in, clipped to one line."""
    tracking_env.setenv("MLFLOW_EXPERIMENT_NAME", "team/" + "long-sweep-" * 8)
    plan = make_plan(tmp_path, 2)
    jt = JobTracking.create("mlflow", plan)
    jt.prepare()
    jt.started()
    waits: list[int] = []
    report = jt.finish(Ended(), waiting=lambda: waits.append(1))
    assert waits == [] and (report.delivered, report.pending) == (0, 0)
    assert "compare ranks" not in report.ui_hint  # compare would refuse a job without a metric
    clipped = ("team/" + "long-sweep-" * 8)[:57] + "..."
    assert report.ui_hint.startswith(f"mlflow: 0 records delivered (experiment {clipped!r})"), \
        report.ui_hint
    assert os.path.isfile(os.path.join(report.spool_dir, "end.json"))
    assert report.wait_ended(300)
