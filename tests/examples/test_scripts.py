"""The example training scripts on their own: one process, no launcher (the in-kernel
`!python train_….py` of the debug environment), and a bad parameter that must fail clearly."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.examples.helpers import example_env, make_project

pytestmark = pytest.mark.slow

SCRIPTS = {"mindspore": "train_mindspore_digits.py", "torch": "train_torch_digits.py"}


def run_script(project, script, *args, env):
    return subprocess.run([sys.executable, str(project / script), *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_script_trains_standalone_and_restores_its_checkpoint(framework, tmp_path):
    project = make_project(tmp_path)
    env = {**example_env(tmp_path), "PLATFORM_TRACKING": "none"}
    result = run_script(project, SCRIPTS[framework], "--epochs", "2", "--sample-size", "600",
                        "--out-dir", "out", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((project / "out" / "rank_0.json").read_text())
    assert summary["world_size"] == 1
    assert summary["epoch_loss"][1] < summary["epoch_loss"][0]
    assert summary["restored_params_sha256"] == summary["params_sha256"]
    assert summary["test_accuracy"] > 0.3  # 10 classes: chance is 0.1


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_sample_too_small_for_a_batch_exits_2_with_the_fix(framework, tmp_path):
    project = make_project(tmp_path)
    env = {**example_env(tmp_path), "PLATFORM_TRACKING": "none"}
    result = run_script(project, SCRIPTS[framework], "--sample-size", "20", "--batch-size", "32",
                        "--out-dir", "out", env=env)
    assert result.returncode == 2
    assert "raise --sample-size or lower --batch-size" in result.stderr
    assert not (project / "out").exists()



@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_script_under_the_launcher_continues_from_its_newest_checkpoint(framework, tmp_path):
    """What a restarted job's rank sees (the checkpoint folder the launcher gives every rank):
    a second run with more epochs starts after the first run's last checkpoint."""
    project = make_project(tmp_path)
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    env = {**example_env(tmp_path), "PLATFORM_TRACKING": "none",
           "PLATFORM_CHECKPOINT_DIR": str(checkpoints)}
    args = ["--sample-size", "600", "--out-dir", "out"]
    first = run_script(project, SCRIPTS[framework], "--epochs", "2", *args, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(json.loads((project / "out" / "rank_0.json").read_text())["epoch_loss"]) == 2

    second = run_script(project, SCRIPTS[framework], "--epochs", "3", *args, env=env)

    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((project / "out" / "rank_0.json").read_text())
    assert summary["initial_epoch"] == 2
    assert len(summary["epoch_loss"]) == 1  # epoch 3 only
    assert "epoch 3 loss" in second.stdout and "epoch 1 loss" not in second.stdout
    assert summary["restored_params_sha256"] == summary["params_sha256"]
    manifests = sorted(checkpoints.glob("step-*/manifest.json"))
    assert [json.loads(p.read_text())["epoch"] for p in manifests] == [2, 3]
