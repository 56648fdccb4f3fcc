"""Real jobs started with torchrun's and msrun's command lines: training scripts of our own
that read only what the peers' scripts read (tests/assets/launch/ddp_tutorial.py, written as
pytorch/examples' DDP tutorial is; ms_net.py, as MindSpore's startup_method sample), on
synthetic data they make. The variables the ranks see (torchrun's, compared with real
torchrun's), a failing rank's recorded exception in the root cause, the restart's words, a
.env's MS_TOPO_TIMEOUT, and --rank-dir's folders."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.launcher.helpers import ASSETS, PY, log_text

pytestmark = pytest.mark.slow
TUTORIAL = ASSETS / "ddp_tutorial.py"
MS_NET = ASSETS / "ms_net.py"
TORCHRUN = os.path.join(os.path.dirname(PY), "torchrun")
# what a rank may see differently under the two launchers: where things are, ports, ids (with
# --standalone torchrun's MASTER_ADDR is `localhost`, ours 127.0.0.1: the store listens there)
DIFFERS = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}
# torchrun's agent sets this in its own environment for its signal handling; the ranks inherit
# it, no rank reads it (the launcher stops on SIGINT, SIGTERM and SIGHUP always)
AGENT_ONLY = {"TORCHELASTIC_SIGNALS_TO_HANDLE"}


def _environ(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PLATFORM_", "MS_", "TORCHELASTIC_", "OMP_"))}
    env["HOME"] = str(tmp_path)
    return env


def _launch(args, cwd, timeout=400):
    return subprocess.run([PY, "-m", "platform_plugin", "launch", "--tracking", "none", *args],
                          cwd=cwd, env=_environ(cwd), capture_output=True, text=True,
                          timeout=timeout)


def _envs(folder):
    return {int(name[4:-5]): json.loads((folder / name).read_text())
            for name in os.listdir(folder) if name.startswith("env_")}


def test_a_torch_rank_sees_what_torchrun_gives_it(tmp_path):
    for side in ("torchrun", "platform-run"):
        (tmp_path / side).mkdir()
    script = ["--standalone", "--nproc-per-node", "2", str(TUTORIAL), "1", "1", "--samples",
              "256", "--env-out"]
    peer = subprocess.run([TORCHRUN, *script, str(tmp_path / "torchrun")], cwd=tmp_path,
                          env=_environ(tmp_path), capture_output=True, text=True, timeout=400)
    assert peer.returncode == 0, peer.stderr[-3000:]
    ours = _launch([*script, str(tmp_path / "platform-run")], tmp_path)
    assert ours.returncode == 0, ours.stdout[-3000:] + ours.stderr[-3000:]
    theirs, mine = _envs(tmp_path / "torchrun"), _envs(tmp_path / "platform-run")
    assert sorted(theirs) == sorted(mine) == [0, 1]
    for rank in (0, 1):
        wanted = {k: v for k, v in theirs[rank].items()
                  if k.startswith(("TORCHELASTIC_", "GROUP_", "ROLE_", "LOCAL_", "WORLD_",
                                   "MASTER_", "TORCH_NCCL_"))
                  and k not in AGENT_ONLY or k in ("RANK", "OMP_NUM_THREADS")}
        assert {"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE"} <= set(wanted)
        assert set(wanted) <= set(mine[rank]), set(wanted) - set(mine[rank])
        assert {k: v for k, v in wanted.items() if k not in DIFFERS} == \
            {k: mine[rank][k] for k in wanted if k not in DIFFERS}
    # the launch line says the thread default once
    assert ours.stdout.count("OMP_NUM_THREADS=") == 1


def test_a_failing_rank_recorded_exception_and_a_restart_that_resumes_its_own_snapshot(tmp_path):
    """torch's @record writes the exception to TORCHELASTIC_ERROR_FILE: the root cause shows
    it. The script keeps its own snapshot: the launcher does not claim it started over."""
    done = _launch(["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                    str(TUTORIAL), "3", "1", "--samples", "256", "--fail-rank", "1",
                    "--fail-epoch", "1"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert ("recorded by the rank (TORCHELASTIC_ERROR_FILE): RuntimeError: rank 1 failed on "
            "purpose in epoch 1") in out
    assert "in epoch" in out.split("recorded by the rank")[1].splitlines()[1]  # its frame
    assert ("attempt 2 started; no platform checkpoint to resume from (the script may keep its "
            "own)") in out
    assert "from the beginning" not in out and "steps lost" not in out
    [job_dir] = [str(p) for p in (tmp_path / "platform_logs").iterdir()]
    assert "Resuming training from snapshot at Epoch " in log_text(job_dir, "0")
    recorded = json.loads(open(os.path.join(job_dir, "rank_1.attempt1.error.json")).read())
    assert recorded["message"]["message"].startswith("RuntimeError: rank 1 failed")
    # torch prefixes the failing rank's traceback with its own `[rank1]:`: never doubled
    assert "[rank 1] [rank1]:" not in out


def test_rank_dir_runs_each_rank_in_its_fresh_folder(tmp_path):
    shutil.copy(TUTORIAL, tmp_path / "train.py")
    (tmp_path / "envs").mkdir()
    (tmp_path / "device_1").mkdir()
    (tmp_path / "device_1" / "kernel_meta_of_an_earlier_run").write_text("")
    done = _launch(["--standalone", "--nproc-per-node", "2", "--rank-dir", "device_{rank_id}",
                    "train.py", "2", "1", "--samples", "256", "--env-out", "envs"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    envs = _envs(tmp_path / "envs")  # `envs` existed where we launched: still meant there
    assert [envs[r]["CWD"] for r in (0, 1)] == [str(tmp_path / "device_0"),
                                                str(tmp_path / "device_1")]
    assert os.listdir(tmp_path / "device_1") == []  # made anew: rank 1 saves no snapshot
    assert os.listdir(tmp_path / "device_0") == ["snapshot.pt"]  # written where it ran
    assert not (tmp_path / "snapshot.pt").exists()


def test_mindspore_with_msruns_command_line_sees_the_timeout_of_the_env_file(tmp_path):
    (tmp_path / ".env").write_text("MS_TOPO_TIMEOUT=77\n")
    done = _launch(["--worker_num=2", "--local_worker_num=2", "--master_addr=127.0.0.1",
                    "--log_dir=msrun_log", "--join=True", str(MS_NET)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [job_dir] = [str(p) for p in (tmp_path / "msrun_log").iterdir()]
    for rank in ("0", "1"):
        [line] = [x for x in log_text(job_dir, rank).splitlines() if x.startswith("ENV ")]
        seen = json.loads(line[4:])
        assert (seen["MS_TOPO_TIMEOUT"], seen["MS_WORKER_NUM"], seen["RANK_ID"]) == \
            ("77", "2", rank)
        assert seen["OMP_NUM_THREADS"] == str(max(1, len(os.sched_getaffinity(0)) // 2))
        assert "loss is" in log_text(job_dir, rank)  # LossMonitor's lines: it trained
