"""Jobs' checkpoints survive `platform-run clean` unless asked (`--checkpoints`), and a cleanup
never reaches a running job's checkpoint folder. Real CLI processes, a real launch, real
files."""
from __future__ import annotations

import subprocess
import sys

from tests.helpers import clean_env, wait_for
from tests.notebook.helpers import write_tree

STEP_10 = "platform_logs/train-20261203-101010-abcd/checkpoints/step-0000000010"
STEP_20 = "ckpts/step-0000000020"  # a --checkpoint-dir inside CODE/


def _tree(tmp_path):
    code = tmp_path / "CODE"
    write_tree(code, {
        "train.py": "",
        "old.ckpt": "x",  # a model an earlier run left: goes
        "platform_logs/train-20261203-101010-abcd/rank_0.log": "log",
        f"{STEP_10}/model.ckpt": "model",
        f"{STEP_10}/manifest.json": "{}",
        f"{STEP_20}/net.ckpt": "model",
        "ckpts/step-1/net.ckpt": "not the contract's name: goes",
    })
    return code


def _clean(code, *args):
    return subprocess.run([sys.executable, "-m", "platform_plugin", "clean", "--root",
                           str(code), *args], env=clean_env(), capture_output=True, text=True,
                          timeout=120)


def test_clean_keeps_checkpoint_folders_and_removes_the_rest(tmp_path):
    code = _tree(tmp_path)
    done = _clean(code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (code / "old.ckpt").exists()
    assert not (code / "platform_logs/train-20261203-101010-abcd/rank_0.log").exists()
    assert not (code / "ckpts/step-1/net.ckpt").exists()
    assert (code / STEP_10 / "model.ckpt").read_text() == "model"
    assert (code / STEP_10 / "manifest.json").exists()
    assert (code / STEP_20 / "net.ckpt").read_text() == "model"


def test_clean_with_checkpoints_removes_them_too(tmp_path):
    code = _tree(tmp_path)
    dry = _clean(code, "--checkpoints", "--dry-run")
    assert dry.returncode == 0 and STEP_20 in dry.stdout, dry.stdout + dry.stderr
    done = _clean(code, "--checkpoints")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (code / STEP_10).exists() and not (code / STEP_20).exists()


RANK = ("import os, time\nopen(os.path.join(os.environ['PLATFORM_CHECKPOINT_DIR'], 'ready'), "
        "'w').close()\nwhile not os.path.exists('go'): time.sleep(0.05)\n")


def test_a_cleanup_of_the_folder_holding_a_running_jobs_checkpoints_is_refused(tmp_path):
    """The job works elsewhere (its folder and log folder are not in CODE/); only its
    --checkpoint-dir is: the cleanup is refused all the same while the job runs."""
    code, work = tmp_path / "CODE", tmp_path / "work"
    write_tree(code, {"train.py": ""})
    write_tree(work, {"rank.py": RANK})
    checkpoints = code / "ckpts"
    job = subprocess.Popen([sys.executable, "-m", "platform_plugin", "launch", "--nproc", "1",
                            "--tracking", "none", "--backend", "plain", "--checkpoint-dir",
                            str(checkpoints), "--", sys.executable, "rank.py"], cwd=work,
                           env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        wait_for(lambda: (checkpoints / "ready").exists() or job.poll() is not None,
                 timeout=60, what="the job's rank")
        assert job.poll() is None, job.communicate()
        refused = _clean(code, "--checkpoints")
        assert refused.returncode == 2 and "CLEAN_ROOT_BUSY" in refused.stdout + refused.stderr
        assert (checkpoints / "ready").exists()
    finally:
        (work / "go").write_text("")
        out, err = job.communicate(timeout=60)
    assert job.returncode == 0, out + err
