"""launch/plan.py and backends.py: pure, so every backend and table shape is checked here."""
from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from platform_plugin import settings as settings_mod
from platform_plugin.errors import ConfigError
from platform_plugin.launcher.planning.auto_backend import program_source
from platform_plugin.launcher.planning.backends import choose, default_nproc
from platform_plugin.launcher.display.output import parse_show
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.planning.plan import (ADAPTER_JOB_ID, Host, ascend_job_id,
                                                    default_job_name, normalize_command)

from tests.launcher.helpers import planned

NO_TABLE = settings_mod.resolve("debug", environ={}, cwd="/nonexistent-cwd-for-tests")


def table_settings(ranktables, name, **environ):
    return settings_mod.resolve("full", environ={"RANK_TABLE_FILE": str(ranktables / name),
                                                 **environ}, cwd=str(ranktables))


def opts(**kw):
    """Test defaults; `base_env`/`npu_present` describe the host, the rest are options."""
    base = dict(job_id="job-1", log_dir="/tmp/logs", cwd="/work/code", base_env={"KEEP": "1"},
                cache_dir="/tmp/cache")
    base.update(kw)
    return base


def plan_of(command, settings, kw):
    host = Host(base_env=kw.pop("base_env"), npu_present=kw.pop("npu_present", False))
    return planned(command, settings, LaunchOptions(**kw), host)


def env_of(plan, name):
    return next(r for r in plan.ranks if r.name == name).env


COMMON = ("RANK_ID", "DEVICE_ID", "RANK_SIZE", "LOCAL_RANK", "JOB_ID", "PLATFORM_JOB_NAME",
          "PLATFORM_JOB_DIR", "PLATFORM_SERVER_ID")


def test_the_checkpoint_folder_and_the_resume_step_every_rank_gets():
    plan = plan_of(["python", "train.py"], NO_TABLE, opts(backend="plain", nproc=2))
    assert plan.checkpoint_dir == "/tmp/logs/job-1/checkpoints" and plan.resume_step is None
    for rank in plan.ranks:
        assert rank.env["PLATFORM_CHECKPOINT_DIR"] == "/tmp/logs/job-1/checkpoints"
        assert "PLATFORM_RESUME_STEP" not in rank.env
    host = Host(base_env={"PLATFORM_RESUME_STEP": "7"})  # the launcher's own word only
    options = LaunchOptions(**{k: v for k, v in opts(backend="plain", nproc=1,
                                                     checkpoint_dir="ckpt").items()
                               if k != "base_env"})
    plan = planned(["python", "train.py"], NO_TABLE, options, host, attempt=1,
                   resume_step=60)
    assert plan.ranks[0].env["PLATFORM_CHECKPOINT_DIR"] == "/work/code/ckpt"  # the ranks' cwd
    assert plan.ranks[0].env["PLATFORM_RESUME_STEP"] == "60" and plan.resume_step == 60
    plan = planned(["python", "train.py"], NO_TABLE, options, host)
    assert "PLATFORM_RESUME_STEP" not in plan.ranks[0].env
    from_env = Host(base_env={"PLATFORM_CHECKPOINT_DIR": "/shared/ckpt"})
    options = LaunchOptions(**{k: v for k, v in opts(backend="plain", nproc=1).items()
                               if k != "base_env"})
    plan = planned(["python", "train.py"], NO_TABLE, options, from_env)
    assert plan.ranks[0].env["PLATFORM_CHECKPOINT_DIR"] == "/shared/ckpt"


def test_plain_sets_only_rank_variables_and_keeps_the_base_env():
    plan = plan_of(["python", "train.py", "--lr", "{0.1}"], NO_TABLE, opts(backend="plain", nproc=3))
    assert plan.backend == "plain" and plan.world_size == 3 and len(plan.ranks) == 3
    assert plan.command == (sys.executable, "train.py", "--lr", "{0.1}")
    for i, rank in enumerate(plan.ranks):
        assert (rank.name, rank.rank_id, rank.local_rank, rank.device_id) == (str(i), i, i, i)
        assert all(k in rank.env for k in COMMON)
        assert rank.env["PYTHONUNBUFFERED"] == "1" and rank.env["KEEP"] == "1"
        assert rank.env["RANK_ID"] == str(i) and rank.env["RANK_SIZE"] == "3"
        assert "MASTER_PORT" not in rank.env and "MS_ROLE" not in rank.env
        assert rank.log_path == f"/tmp/logs/job-1/rank_{i}.log"
        assert rank.cwd == "/work/code"
    assert plan.job_dir == "/tmp/logs/job-1" and plan.job_name == "train"


def test_torch_sets_the_torchrun_variables():
    plan = plan_of(["python", "t.py"], NO_TABLE, opts(backend="torch", nproc=2))
    port = plan.master_port
    assert isinstance(port, int) and port > 0
    for i, rank in enumerate(plan.workers):
        e = rank.env
        assert (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) == (
            str(i), str(i), "2", "2")
        assert e["MASTER_ADDR"] == "127.0.0.1" and e["MASTER_PORT"] == str(port)
        # every rank is a client of the launcher's store; gloo on loopback (single server)
        assert e["TORCHELASTIC_USE_AGENT_STORE"] == "True" and e["GLOO_SOCKET_IFNAME"] == "lo"


def test_torch_store_is_a_helper_on_node_0_only():
    plan = plan_of(["python", "t.py"], NO_TABLE, opts(backend="torch", nproc=2))
    [store] = [r for r in plan.ranks if r.role != "worker"]
    assert (store.name, store.role) == ("store", "service") and store.argv[1] == "-c"
    assert store.log_path.endswith("/store.log") and "master_listen_fd" in store.argv[2]
    node1 = plan_of(["python", "t.py"], NO_TABLE, opts(backend="torch", nproc=2, nnodes=2,
                                                       node_rank=1, master_port=29500))
    assert all(r.role == "worker" for r in node1.ranks)
    assert "GLOO_SOCKET_IFNAME" not in node1.ranks[0].env


def test_ms_cluster_has_one_scheduler_and_workers_with_node_ids():
    plan = plan_of(["python", "t.py"], NO_TABLE, opts(backend="ms-cluster", nproc=2))
    sched, *workers = plan.ranks
    assert (sched.name, sched.role, sched.rank_id, sched.device_id) == ("sched", "sched", None, None)
    assert sched.log_path.endswith("/sched.log") and sched.env["MS_ROLE"] == "MS_SCHED"
    assert [w.env["MS_NODE_ID"] for w in workers] == ["0", "1"]
    for proc in plan.ranks:
        e = proc.env
        assert e["MS_SCHED_HOST"] == "127.0.0.1" and e["MS_SCHED_PORT"] == str(plan.master_port)
        assert e["MS_WORKER_NUM"] == "2" and "MS_ENABLE_RECOVERY" not in e
        assert 0 < int(e["MS_TOPO_TIMEOUT"]) <= 300 and 0 < int(e["MS_NODE_TIMEOUT"]) < 300
    assert all(w.env["MS_ROLE"] == "MS_WORKER" for w in workers)
    assert plan.workers == tuple(workers)


def test_multi_node_ms_cluster_second_node_has_no_scheduler():
    plan = plan_of(["python", "t.py"], NO_TABLE, opts(backend="ms-cluster", nproc=2, nnodes=2,
                                                         node_rank=1, master_addr="10.0.0.1",
                                                         master_port=29500))
    assert [r.name for r in plan.ranks] == ["2", "3"]
    assert [r.env["LOCAL_RANK"] for r in plan.ranks] == ["0", "1"]
    assert all(r.env["MS_WORKER_NUM"] == "4" and r.env["MS_SCHED_HOST"] == "10.0.0.1"
               for r in plan.ranks)


@pytest.mark.parametrize("kw, code", [
    (dict(nnodes=2, node_rank=1), "LAUNCH_MASTER_PORT"),
    # plain too: without the port its launchers never met, each server "succeeded" alone
    (dict(backend="plain", nnodes=2, node_rank=0), "LAUNCH_MASTER_PORT"),
    # the control port is --master-port + 1: 65535 made node 0 crash (OverflowError in bind)
    (dict(nnodes=2, node_rank=0, master_port=65535), "LAUNCH_MASTER_PORT"),
    (dict(nnodes=2, node_rank=2, master_port=1), "LAUNCH_NODE_RANK"),
    (dict(nproc=0), "LAUNCH_NPROC"),
    (dict(backend="bogus"), "LAUNCH_BACKEND"),
])
def test_bad_options_are_config_errors(kw, code):
    options = dict(backend="torch", nproc=2)
    options.update(kw)
    with pytest.raises(ConfigError) as err:
        plan_of(["python", "t.py"], NO_TABLE, opts(**options))
    assert err.value.problems[0].code == code


def test_nproc_defaults_to_two_without_npus_and_to_the_visible_npus():
    """The README's first commands give no --nproc: on a CPU box they run 2 ranks (no /dev/davinci
    here, so the NPU branch is exercised through a stand-in listing)."""
    plan = plan_of(["python", "t.py"], NO_TABLE, opts(backend="plain", nproc=None))
    assert len(plan.workers) == min(2, os.cpu_count() or 1)
    assert default_nproc(Host())[1].startswith("no NPUs")


def test_nproc_default_counts_visible_npus(monkeypatch):
    from platform_plugin.util import devices  # (a stand-in for /dev: no NPU exists here)
    monkeypatch.setattr(devices, "dev_names", lambda: [f"davinci{i}" for i in range(8)]
                        + ["davinci_manager", "null"])
    assert default_nproc(Host(npu_present=True))[0] == 8
    visible = Host(npu_present=True, base_env={"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"})
    assert default_nproc(visible) == (4, "4 visible NPU(s)")


def test_rank_table_8p(ranktables):
    s = table_settings(ranktables, "hccl_8p_01234567_10.0.0.1.json")
    plan = plan_of(["python", "t.py"], s, opts(backend="rank-table"))
    assert plan.world_size == 8 and plan.nnodes == 1 and plan.server_id == "10.0.0.1"
    assert [(r.env["RANK_ID"], r.env["DEVICE_ID"]) for r in plan.ranks] == [
        (str(i), str(i)) for i in range(8)]
    assert all(r.env["RANK_SIZE"] == "8" and r.env["RANK_TABLE_FILE"].endswith("8p_01234567_10.0.0.1.json")
               for r in plan.ranks)


def test_rank_table_4p_uses_the_physical_device_id(ranktables):
    """davincirunsdk exports the list index (0..3); HCCL needs the device_id (4..7)."""
    s = table_settings(ranktables, "hccl_4p_4567_10.0.0.1.json")
    plan = plan_of(["python", "t.py"], s, opts(backend="rank-table"))
    assert [(r.rank_id, r.device_id, r.local_rank) for r in plan.ranks] == [
        (0, 4, 0), (1, 5, 1), (2, 6, 2), (3, 7, 3)]
    assert [r.env["DEVICE_ID"] for r in plan.ranks] == ["4", "5", "6", "7"]
    assert plan.world_size == 4


def test_rank_table_device_id_counts_within_ascend_rt_visible_devices(ranktables):
    """A container that sees only cards 4-7 numbers them 0-3: DEVICE_ID must follow."""
    s = table_settings(ranktables, "hccl_4p_4567_10.0.0.1.json",
                       ASCEND_RT_VISIBLE_DEVICES="4,5,6,7")
    plan = plan_of(["python", "t.py"], s, opts(backend="rank-table"))
    assert [(r.rank_id, r.device_id) for r in plan.ranks] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert [r.env["DEVICE_ID"] for r in plan.ranks] == ["0", "1", "2", "3"]


def test_rank_table_gives_the_tf_adapter_its_variables(ranktables):
    """Ascend's TF Adapter reads RANK_TABLE_FILE, RANK_ID, RANK_SIZE, ASCEND_DEVICE_ID (the
    card's logical id: the runtime id DEVICE_ID holds) and JOB_ID."""
    s = table_settings(ranktables, "hccl_4p_4567_10.0.0.1.json")
    plan = plan_of(["python", "t.py"], s, opts(backend="rank-table",
                                               base_env={"ASCEND_DEVICE_ID": "0"}))
    assert [r.env["ASCEND_DEVICE_ID"] for r in plan.ranks] == ["4", "5", "6", "7"]
    visible = table_settings(ranktables, "hccl_4p_4567_10.0.0.1.json",
                             ASCEND_RT_VISIBLE_DEVICES="4,5,6,7")
    plan = plan_of(["python", "t.py"], visible, opts(backend="rank-table"))
    assert [(r.env["DEVICE_ID"], r.env["ASCEND_DEVICE_ID"]) for r in plan.ranks] == [
        (str(i), str(i)) for i in range(4)]
    assert all(r.env["JOB_ID"] == "job-1" for r in plan.ranks)


def test_job_id_variable_is_one_the_tf_adapter_takes():
    """JOB_ID: letters, digits, '-' and '_', not a number with a leading 0 (the TF Adapter's
    documented rule). A job id it takes is JOB_ID unchanged; any other gets a spelling of its
    own, the same for the same id, different for different ids."""
    for taken in ("job-1", "train-20261203-101010-ab12", "team_run_7", "10087"):
        assert ascend_job_id(taken) == taken
    spelled = {i: ascend_job_id(i) for i in ("中文-训练-20261203-101010-ab12", "tf1.v2", "tf1_v2.",
                                             "a b", "007", "训练")}
    assert all(ADAPTER_JOB_ID.fullmatch(v) and not v.isdigit() for v in spelled.values())
    assert len(set(spelled.values())) == len(spelled) and spelled["tf1.v2"].startswith("tf1_v2-")
    assert ascend_job_id("tf1.v2") == spelled["tf1.v2"]
    plan = plan_of(["python", "训练.py"], NO_TABLE, opts(backend="plain", nproc=2, job_id=None))
    assert plan.job_id.startswith("训练-")  # the folder keeps the script's name
    assert {r.env["JOB_ID"] for r in plan.ranks} == {plan.env_job_id} != {plan.job_id}
    assert ADAPTER_JOB_ID.fullmatch(plan.env_job_id)


def test_rank_table_device_hidden_by_ascend_rt_visible_devices(ranktables):
    s = table_settings(ranktables, "hccl_4p_4567_10.0.0.1.json",
                       ASCEND_RT_VISIBLE_DEVICES="0,1,2,3")
    with pytest.raises(ConfigError) as err:
        plan_of(["python", "t.py"], s, opts(backend="rank-table"))
    assert err.value.problems[0].code == "RT_DEVICE_NOT_VISIBLE"


def test_rank_table_second_server_of_16p(ranktables):
    s = table_settings(ranktables, "hccl_2s_16p.json", RANK_START="8")
    plan = plan_of(["python", "t.py"], s, opts(backend="rank-table"))
    assert plan.node_rank == 1 and plan.nnodes == 2 and plan.world_size == 16
    assert [r.env["RANK_ID"] for r in plan.ranks] == [str(i) for i in range(8, 16)]
    assert [r.env["DEVICE_ID"] for r in plan.ranks] == [str(i) for i in range(8)]
    assert all(r.env["RANK_SIZE"] == "16" and r.env["PLATFORM_SERVER_ID"] == "10.0.0.2"
               for r in plan.ranks)
    assert [r.log_path.rsplit("/", 1)[1] for r in plan.ranks][0] == "rank_8.log"


def test_rank_table_nproc_disagreeing_with_the_table(ranktables):
    s = table_settings(ranktables, "hccl_4p_4567_10.0.0.1.json")
    with pytest.raises(ConfigError) as err:
        plan_of(["python", "t.py"], s, opts(backend="rank-table", nproc=8))
    assert err.value.problems[0].code == "LAUNCH_NPROC_TABLE"


def test_rank_table_without_a_table():
    with pytest.raises(ConfigError) as err:
        plan_of(["python", "t.py"], NO_TABLE, opts(backend="rank-table"))
    assert err.value.problems[0].code == "LAUNCH_NO_RANK_TABLE"


def test_caches_and_ascend_logs_go_to_a_per_job_folder_outside_the_code(ranktables):
    s = table_settings(ranktables, "hccl_4p_4567_10.0.0.1.json")
    plan = plan_of(["python", "t.py"], s, opts(backend="rank-table"))
    assert plan.cache_dir == "/tmp/cache/job-1"
    logs = {r.env["ASCEND_PROCESS_LOG_PATH"] for r in plan.ranks}
    assert len(logs) == 4 and all(p.startswith("/tmp/cache/job-1/") for p in logs)
    assert {r.env["MS_COMPILER_CACHE_PATH"] for r in plan.ranks} == {"/tmp/cache/job-1/compiler_cache"}
    default = plan_of(["python", "t.py"], s, opts(backend="rank-table", cache_dir=None,
                                                     base_env={"PLATFORM_CACHE_DIR": "/c"}))
    assert default.cache_dir == "/c/job-1"
    home = plan_of(["python", "t.py"], s, opts(backend="rank-table", cache_dir=None))
    assert home.cache_dir == os.path.expanduser("~/.cache/platform_plugin/job-1")


def test_extra_env_wins_and_log_dir_comes_from_the_platform_variable():
    plan = plan_of(["python", "t.py"], NO_TABLE,
                      opts(backend="plain", nproc=1, log_dir=None, env={"RANK_SIZE": "x", "A": "b"},
                           base_env={"PLATFORM_LOG_DIR": "/var/jobs"}))
    assert plan.ranks[0].env["A"] == "b" and plan.ranks[0].env["RANK_SIZE"] == "x"
    assert plan.job_dir == "/var/jobs/job-1"
    relative = plan_of(["python", "t.py"], NO_TABLE, opts(backend="plain", nproc=1, log_dir=None,
                                                             base_env={}))
    assert relative.job_dir == "/work/code/platform_logs/job-1"


def test_auto_choice_reads_the_program(tmp_path, ranktables):
    ms, torch, other = (tmp_path / n for n in ("a.py", "b.py", "c.py"))
    ms.write_text("import os\nfrom mindspore import nn\n")
    torch.write_text("import torch.distributed as dist\n")
    other.write_text("print('mindspore is only mentioned')\n")
    assert choose("auto", ["python", str(ms)], NO_TABLE, False)[0] == "ms-cluster"
    assert choose("auto", ["python", "-u", str(torch)], NO_TABLE, False)[0] == "torch"
    assert choose("auto", ["python", "-W", "ignore", str(ms)], NO_TABLE, False)[0] == "ms-cluster"
    name, reason = choose("auto", ["python", str(other)], NO_TABLE, False)
    assert name == "plain" and "neither" in reason
    assert choose("auto", ["python", "-c", "import mindspore"], NO_TABLE, False)[0] == "ms-cluster"
    tf1, adapter = tmp_path / "tf1.py", tmp_path / "npu.py"
    tf1.write_text("import numpy as np\nimport tensorflow.compat.v1 as tf\n")
    adapter.write_text("from npu_bridge.npu_init import *\n")
    name, reason = choose("auto", ["python", str(tf1)], NO_TABLE, False)
    assert name == "plain" and "imports tensorflow" in reason
    assert choose("auto", ["python", str(adapter)], NO_TABLE, False)[0] == "plain"
    assert choose("auto", ["python", "-m", "json.tool"], NO_TABLE, False)[0] == "plain"
    assert choose("auto", ["./run.sh"], NO_TABLE, False)[0] == "plain"
    s = table_settings(ranktables, "hccl_8p_01234567_10.0.0.1.json")
    assert choose("auto", ["python", str(torch)], s, True)[0] == "rank-table"
    assert choose("auto", ["python", str(tf1)], s, True)[0] == "rank-table"
    assert choose("auto", ["python", str(ms)], s, False)[0] == "ms-cluster"  # no NPUs here
    assert choose("torch", ["python", str(ms)], s, True) == ("torch", "requested")


def test_program_source_and_names():
    assert program_source(["python", "-c", "x=1"]) == ("python -c", b"x=1")
    assert normalize_command("python a.py '{x}'") == (sys.executable, "a.py", "{x}")
    assert normalize_command(["train.py"]) == (sys.executable, "train.py")
    assert normalize_command(["bash", "x"]) == ("bash", "x")
    with pytest.raises(ConfigError) as err:
        normalize_command([])
    assert [p.code for p in err.value.problems] == ["LAUNCH_NO_COMMAND"]
    assert default_job_name((sys.executable, "-u", "dir/my train.py")) == "my-train"
    assert default_job_name((sys.executable, "-m", "pkg.trainer")) == "trainer"
    assert default_job_name(("bash", "run.sh")) == "bash"
    plan = plan_of(["python", "t.py"], NO_TABLE, opts(backend="plain", nproc=1, job_id=None,
                                                         job_name="my job"))
    assert plan.job_id.startswith("my-job-") and len(plan.job_id.split("-")) == 5


def test_parse_show():
    assert parse_show("all") is None and parse_show("none") == set()
    assert parse_show("0,3") == {"0", "3"} and parse_show("sched") == {"sched"}
    with pytest.raises(ConfigError) as err:
        parse_show("rank0")
    assert [p.code for p in err.value.problems] == ["LAUNCH_BAD_SHOW"]


@hsettings(deadline=None, max_examples=40)
@given(nnodes=st.integers(1, 4), nproc=st.integers(1, 8), backend=st.sampled_from(
    ["plain", "torch", "ms-cluster"]))
def test_nodes_together_cover_every_rank_once(nnodes, nproc, backend):
    plans = [plan_of(["python", "t.py"], NO_TABLE,
                        opts(backend=backend, nproc=nproc, nnodes=nnodes, node_rank=i,
                             master_port=29500)) for i in range(nnodes)]
    workers = [w for p in plans for w in p.workers]
    assert sorted(int(w.env["RANK_ID"]) for w in workers) == list(range(nnodes * nproc))
    assert all(w.env["RANK_SIZE"] == str(nnodes * nproc) for w in workers)
    assert all(0 <= int(w.env["LOCAL_RANK"]) < nproc for w in workers)
    scheds = [r for p in plans for r in p.ranks if r.role == "sched"]
    assert len(scheds) == (1 if backend == "ms-cluster" else 0)
    if backend == "torch":
        assert sorted(int(w.env["RANK"]) for w in workers) == list(range(nnodes * nproc))
