"""The example scripts resume by default: under `platform-run launch --max-restarts 1`, with
rank 1 stopped at the end of epoch 2 of 4 on the first attempt, the second attempt starts after
the newest complete checkpoint and the ranks end identical."""
from __future__ import annotations

import pytest

from tests.examples.helpers import assert_data_parallel_run, example_env, job_dirs, make_project, run_cli
from tests.helpers import ASSETS
from tests.launcher.helpers import kill_job

pytestmark = pytest.mark.slow

FAIL_ONCE = ASSETS / "checkpoint" / "fail_once.py"
# the backend is named: `auto` reads fail_once.py, which imports neither framework
SCRIPTS = {"mindspore": ("train_mindspore_digits.py", ["--backend", "ms-cluster"], "digits_mlp.ckpt"),
           "torch": ("train_torch_digits.py", ["--backend", "torch"], "digits_mlp.pt")}


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_example_restarted_after_a_rank_failed_resumes_from_its_checkpoint(framework, tmp_path):
    script, options, checkpoint = SCRIPTS[framework]
    project = make_project(tmp_path)
    env = {**example_env(tmp_path), "PLATFORM_TRACKING": "none", "FAIL_EPOCH": "2"}
    try:
        done = run_cli(["launch", "--nproc", "2", "--max-restarts", "1", "--timeout", "300",
                        *options, "--", "python", str(FAIL_ONCE), script, "--epochs", "4",
                        "--sample-size", "600", "--out-dir", "out"], project, env)
    finally:
        for job in job_dirs(project):
            kill_job(str(job))

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "fail_once: rank 1 exits at the end of epoch 2" in done.stdout
    summaries = assert_data_parallel_run(project, "out", 2, checkpoint)
    # torch's barrier after the save means epoch 2 is complete; MindSpore's rank 0 may not
    # have finished writing epoch 2 when rank 1 stopped the job, but epoch 1 is
    [initial_epoch] = {s["initial_epoch"] for s in summaries}
    assert initial_epoch in ((2,) if framework == "torch" else (1, 2))
    assert all(len(s["epoch_loss"]) == 4 - initial_epoch for s in summaries)
