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

