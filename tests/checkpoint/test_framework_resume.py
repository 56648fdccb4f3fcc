"""A restarted job resumes from its newest complete checkpoint: real 2-rank jobs through
`platform-run launch --max-restarts 1` (MindSpore's dynamic cluster on CPU, torch DDP on gloo),
where rank 1 exits at epoch 3 of 6 on the first attempt only."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ASSETS, REPO, clean_env
from tests.launcher.helpers import kill_job

pytestmark = pytest.mark.slow

MS_JOB = ASSETS / "checkpoint" / "ms_resume.py"
TORCH_JOB = ASSETS / "checkpoint" / "torch_resume.py"


def run_job(folder: Path, script: Path, *options: str, fail: bool = True
            ) -> tuple[subprocess.CompletedProcess, Path]:
    """The job in `folder` (its working folder), rank 1 failing once at epoch 3 if `fail`;
    the launcher's result and the job folder."""
    folder.mkdir(exist_ok=True)
    logs = folder / "logs"
    env = clean_env(PYTHONPATH=str(REPO), EPOCHS="6",
                    **({"FAIL_RANK": "1", "FAIL_EPOCH": "3"} if fail else {}))
    try:
        done = subprocess.run([sys.executable, "-m", "platform_plugin", "launch", "--log-dir", str(logs),
                               "--tracking", "none", "--nproc", "2", "--max-restarts", "1",
                               "--timeout", "240", *options, "--", sys.executable, str(script)],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=400)
    finally:
        for job in logs.iterdir() if logs.is_dir() else ():
            kill_job(str(job))
    [job_dir] = [p for p in logs.iterdir() if (p / "job.json").is_file()]
    return done, job_dir


def reports(folder: Path, attempt: int) -> list[dict]:
    return [json.loads((folder / "out" / f"attempt{attempt}_rank{rank}.json").read_text())
            for rank in (0, 1)]


def test_mindspore_job_resumes_after_the_newest_complete_checkpoint(tmp_path):
    done, job_dir = run_job(tmp_path / "restarted", MS_JOB)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not list((tmp_path / "restarted" / "out").glob("attempt1_*"))  # attempt 1 failed
    first, second = reports(tmp_path / "restarted", 2)
    # rank 0 saves epoch 2's checkpoint before epoch 3's steps, which rank 1 needs to reach its
    # exit: epoch 2 is complete for sure, epoch 3 only if rank 0 finished writing it in time
    assert first["initial_epoch"] == second["initial_epoch"] in (2, 3)
    steps_per_epoch = 8  # 64 samples per rank in batches of 8
    folder = job_dir / "checkpoints" / f"step-{first['initial_epoch'] * steps_per_epoch:010d}"
    assert first["resumed_from"] == second["resumed_from"] == str(folder / "train_network.ckpt")
    assert first["ran"] == second["ran"] == list(range(first["initial_epoch"] + 1, 7))
    assert first["params"] == second["params"]
    log = (job_dir / "rank_1.log").read_text()
    assert f"rank 1 attempt 2 starts after epoch {first['initial_epoch']}" in log

    # the network and the optimizer's state were restored: the same as a run never stopped
    done, _ = run_job(tmp_path / "uninterrupted", MS_JOB, fail=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert reports(tmp_path / "uninterrupted", 1)[0]["params"] == first["params"]


def test_torch_ddp_job_resumes_after_the_newest_complete_checkpoint(tmp_path):
    done, job_dir = run_job(tmp_path / "restarted", TORCH_JOB, "--backend", "torch")

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first, second = reports(tmp_path / "restarted", 2)
    # rank 1 exits after epoch 3's save_checkpoint, whose barrier rank 0 passed after writing
    assert first["start"] == second["start"] == 3
    assert first["ran"] == second["ran"] == [4, 5, 6]
    assert first["params"] == second["params"]
    assert "rank 1 attempt 2 starts at epoch 3" in (job_dir / "rank_1.log").read_text()

    # model, optimizer, sampler epoch and random generators restored: the same as a run
    # never stopped
    done, _ = run_job(tmp_path / "uninterrupted", TORCH_JOB, "--backend", "torch", fail=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert reports(tmp_path / "uninterrupted", 1)[0]["params"] == first["params"]
