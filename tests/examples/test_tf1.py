"""notebooks/tf1_train.py: TensorFlow 1.15 ranks on Python 3.7, launched by `platform-run` of
this (3.9+) environment. Two ranks train and log through the TF1 hook into MLflow; with a rank
table of one 910 server (no NPU here: the table is a stand-in) the ranks see the variables
Ascend's TF Adapter reads, with the table's values."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from platform_plugin.tracking.job.report import DeliveryReport

from tests.examples.helpers import example_env, job_dirs, make_project, run_cli
from tests.helpers import python37
from tests.launcher.helpers import private_table

pytestmark = [pytest.mark.slow, pytest.mark.py37]
SCRIPT = "tf1_train.py"
STEPS = 12


def rank_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The clean example environment; the 3.7 ranks import the package from this checkout."""
    return example_env(tmp_path) | extra


def printed(job_dir: Path, prefix: str) -> dict[int, dict]:
    """{rank: the JSON each rank printed after `prefix`}, read from the rank logs."""
    found = {}
    for log in job_dir.glob("rank_*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                found[int(log.stem.split("_")[1])] = json.loads(line[len(prefix):])
    return found


def test_two_tf1_ranks_train_and_log_their_loss_into_mlflow(tmp_path):
    from mlflow.tracking import MlflowClient
    python = python37()
    project = make_project(tmp_path, [SCRIPT])
    done = run_cli(["launch", "--nproc", "2", "--backend", "plain", "--tracking", "mlflow",
                    "--", python, SCRIPT, "--steps", str(STEPS)], project, rank_env(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert all(f"[rank {r}] rank {r}: {STEPS} steps, loss" in done.stdout for r in (0, 1))
    [job_dir] = job_dirs(project)
    # the forwarding helper ends the runs after the launcher returned
    assert DeliveryReport(spool_dir=str(job_dir / "tracking")).wait_ended(300)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string=f"tags.job_id = '{job_dir.name}'")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.run_name == job_dir.name
    children = sorted((r for r in runs if r.data.tags.get("mlflow.parentRunId")
                       == parents[0].info.run_id), key=lambda r: r.info.run_name)
    assert [r.info.run_name for r in children] == ["rank-00", "rank-01"]
    for rank, run in enumerate(children):
        assert run.data.tags["rank_id"] == str(rank) and run.info.status == "FINISHED"
        assert run.data.params == {"steps": str(STEPS), "batch_size": "32", "lr": "0.5",
                                   "rank_rows": "1000"}
        for name in ("loss", "steps_per_s", "samples_per_s"):  # every point once
            history = client.get_metric_history(run.info.run_id, name)
            assert sorted(m.step for m in history) == list(range(1, STEPS + 1)), name
        losses = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "loss"),
                                          key=lambda m: m.step)]
        assert losses[-1] < losses[0]


def test_tf1_ranks_see_the_tf_adapter_variables_of_a_rank_table(tmp_path, ranktables):
    """Devices 4-7 of a 910 server: ranks 0-3, ASCEND_DEVICE_ID = DEVICE_ID = the physical
    card (no ASCEND_RT_VISIBLE_DEVICES), RANK_SIZE 4, one JOB_ID the Adapter takes although the
    job's name has a '.'."""
    python = python37()
    project = make_project(tmp_path, [SCRIPT])
    table = private_table(ranktables, "hccl_4p_4567_10.0.0.1.json", tmp_path)
    env = rank_env(tmp_path, RANK_TABLE_FILE=str(table), PLATFORM_RUN_MODE="full",
                   PLATFORM_CACHE_DIR=str(tmp_path / "cache"))
    done = run_cli(["launch", "--backend", "rank-table", "--tracking", "none", "--job-name",
                    "tf1.v2", "--", python, SCRIPT, "--steps", "2"], project, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [job_dir] = job_dirs(project)
    seen = printed(job_dir, "ascend_env ")
    devices = {int(d["rank_id"]): d["device_id"]
               for s in json.loads(table.read_text())["server_list"] for d in s["device"]}
    assert sorted(seen) == sorted(devices) == [0, 1, 2, 3]
    for rank, variables in seen.items():
        assert variables["RANK_TABLE_FILE"] == str(table)
        assert variables["RANK_ID"] == str(rank) and variables["RANK_SIZE"] == "4"
        assert variables["ASCEND_DEVICE_ID"] == variables["DEVICE_ID"] == devices[rank]
    job_ids = {v["JOB_ID"] for v in seen.values()}
    assert len(job_ids) == 1 and job_dir.name.startswith("tf1.v2-")
    [job_id] = job_ids
    assert re.fullmatch(r"[A-Za-z0-9_-]+", job_id) and job_id.startswith("tf1_v2-")
