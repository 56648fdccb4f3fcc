"""The framework helpers on their own, in real processes: what they write, what a restart
reads back, and what a rank killed between the data and the manifest leaves (never chosen)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import REPO, clean_env


def run_rank(code: str, checkpoints: Path) -> subprocess.CompletedProcess:
    """`code` as a lone process keeping its checkpoints in `checkpoints`. Without the launcher's
    PLATFORM_ATTEMPT_NUMBER, `resume_point()` takes the newest complete checkpoint there itself: the
    rule node 0's launcher applies before an attempt (manifest.newest_complete)."""
    env = clean_env(PYTHONPATH=str(REPO), PLATFORM_CHECKPOINT_DIR=str(checkpoints))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


# Dies the way a killed rank does, after the data file and before the manifest.
DIE_BEFORE_MANIFEST = """
        import os
        import platform_plugin.checkpoint.saving as saving
        saving.write_manifest = lambda *args, **kwargs: os._exit(9)
"""


@pytest.mark.slow
def test_torch_state_and_random_generators_come_back_on_a_restart(tmp_path):
    saved = run_rank("""
        import json, random, torch
        from platform_plugin.checkpoint.torch import save_checkpoint
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.ones(1, 3)).sum().backward()
        optimizer.step()
        for step in (10, 20, 30):
            save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                            step=step, epoch=step // 10)
        print(json.dumps({"weight": model.weight.tolist(), "torch": torch.rand(2).tolist(),
                          "python": random.random()}))
    """, tmp_path)
    assert saved.returncode == 0, saved.stderr
    before = json.loads(saved.stdout)

    resumed = run_rank("""
        import json, random, torch
        from platform_plugin.checkpoint.torch import load_latest
        torch.manual_seed(1234); random.seed(1234)   # what a fresh process would draw instead
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        state = load_latest()
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        print(json.dumps({"step": state["step"], "epoch": state["epoch"],
                          "weight": model.weight.tolist(), "torch": torch.rand(2).tolist(),
                          "python": random.random(),
                          "momentum": bool(optimizer.state_dict()["state"])}))
    """, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads(resumed.stdout)
    assert (after["step"], after["epoch"]) == (30, 3)
    assert after["momentum"]
    assert {k: after[k] for k in ("weight", "torch", "python")} == \
        {k: before[k] for k in ("weight", "torch", "python")}
    # keep=2: the two newest complete checkpoints stay
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0000000020", "step-0000000030"]
    manifest = json.loads((tmp_path / "step-0000000030" / "manifest.json").read_text())
    assert manifest["files"] == {"state.pt": (tmp_path / "step-0000000030" / "state.pt").stat().st_size}


def test_nothing_to_resume_is_none(tmp_path):
    pytest.importorskip("torch", reason="the torch extra (the Python 3.9 compat venv has none)")
    done = run_rank("""
        from platform_plugin.checkpoint.torch import load_latest
        print(load_latest())
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


@pytest.mark.slow
def test_a_torch_checkpoint_killed_before_its_manifest_is_never_chosen(tmp_path):
    died = run_rank("""
        import torch
        from platform_plugin.checkpoint.torch import save_checkpoint
        save_checkpoint({"w": torch.zeros(2)}, step=10, epoch=1)
    """ + DIE_BEFORE_MANIFEST + """
        save_checkpoint({"w": torch.ones(2)}, step=20, epoch=2)
    """, tmp_path)
    assert died.returncode == 9, died.stderr
    half = tmp_path / "step-0000000020"
    assert (half / "state.pt").is_file() and not (half / "manifest.json").exists()

    resumed = run_rank("""
        from platform_plugin.checkpoint.torch import load_latest
        state = load_latest()
        print(state["step"], state["w"].tolist())
    """, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split() == ["10", "[0.0,", "0.0]"]


def test_a_checkpoint_folder_removed_mid_job_is_a_message_not_a_traceback(tmp_path):
    pytest.importorskip("torch", reason="the torch extra (the Python 3.9 compat venv has none)")
    gone = tmp_path / "checkpoints"  # what a cleanup or a user left: nothing
    done = run_rank("""
        import torch
        from platform_plugin.checkpoint.torch import save_checkpoint
        save_checkpoint({"w": torch.zeros(2)}, step=10, epoch=1)
    """, gone)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"the checkpoint folder {gone} (PLATFORM_CHECKPOINT_DIR) does not exist" in done.stderr


@pytest.mark.slow
def test_a_mindspore_checkpoint_killed_before_its_manifest_is_never_chosen(tmp_path):
    """A lone MindSpore process (no collectives: rank 0) trains 3 epochs of 4 steps with the
    callback and dies while saving epoch 2; the restart resumes after epoch 1."""
    train = """
        import numpy as np
        import mindspore as ms
        import mindspore.dataset as ds
        from mindspore import nn
        from mindspore.train import Model
        from platform_plugin.checkpoint.mindspore import CheckpointCallback, restore
        ms.set_seed(0)
        x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
        data = ds.NumpySlicesDataset((x, (x.sum(1) > 0).astype(np.int32)), column_names=["x", "y"],
                                     shuffle=False).batch(4)
        net = nn.Dense(4, 2)
        optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer)
        initial_epoch = restore(net, optimizer)
        print("initial_epoch", initial_epoch)
    """
    died = run_rank(train + """
        import os
        from mindspore.train import Callback
        import platform_plugin.checkpoint.saving as saving
        class DieInEpochTwo(Callback):
            def on_train_epoch_begin(self, run_context):
                if run_context.original_args().cur_epoch_num == 2:
                    saving.write_manifest = lambda *args, **kwargs: os._exit(9)
        model.train(3, data, callbacks=[DieInEpochTwo(), CheckpointCallback()], dataset_sink_mode=False)
    """, tmp_path)
    assert died.returncode == 9, died.stderr[-3000:]
    assert "initial_epoch 0" in died.stdout
    half = tmp_path / "step-0000000008"
    assert (half / "train_network.ckpt").is_file() and not (half / "manifest.json").exists()
    assert (tmp_path / "step-0000000004" / "manifest.json").is_file()

    resumed = run_rank(train + """
        from platform_plugin.checkpoint.mindspore import resume_point
        print("resume", resume_point().file)
        print("momenta", float(np.abs(optimizer.moments[0].asnumpy()).sum()) > 0)
        from platform_plugin.tracking.integrations.mindspore import MetricsCallback
        class Steps:  # records the steps the tracking callback logs the loss at
            steps = []
            def log_metric(self, key, value, step=None): self.steps.append(step)
            def __getattr__(self, name): return lambda *args, **kwargs: None
        model.train(3, data, callbacks=[CheckpointCallback(), MetricsCallback(tracker=Steps())],
                    dataset_sink_mode=False, initial_epoch=initial_epoch)
        print("logged steps", Steps.steps)
    """, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "initial_epoch 1" in resumed.stdout
    assert f"resume {tmp_path / 'step-0000000004' / 'train_network.ckpt'}" in resumed.stdout
    assert "momenta True" in resumed.stdout  # the optimizer's state came back too
    # the loss curve continues at the job's step 5, not at the resumed train()'s own step 1
    assert f"logged steps {list(range(5, 13))}" in resumed.stdout
    manifest = json.loads((tmp_path / "step-0000000012" / "manifest.json").read_text())
    assert (manifest["step"], manifest["epoch"]) == (12, 3)
