"""torchrun's and msrun's command lines under `platform-run launch`: every flag of both (read
from the installed torch and MindSpore sources) is one of ours, mapped, accepted or refused as
docs/launch.md's table says; what the mapped ones become; the environment defaults the user's
values override; --rank-dir's plan."""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
from pathlib import Path

import pytest

from platform_plugin.errors import ConfigError
from platform_plugin.launcher.options import (FIELDS, PEER_FLAGS, add_arguments, command_of,
                                              flags_of, from_arguments)
from platform_plugin.launcher.planning.plan import Host, build_plan
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.util.devices import usable_cores
from tests.launcher.helpers import PY, ASSETS, finish_all, free_port_pair, start_cli
from tests.launcher.test_plan import NO_TABLE

REPO = Path(__file__).resolve().parents[2]
FLAG = re.compile(r'"(-(?:-[a-z][a-z_-]*|[a-z]))"')


def _source_flags(module: str, relative: str) -> set[str]:
    """The flags a peer's argument parser declares, read from its installed source (no import:
    MindSpore's takes seconds)."""
    spec = importlib.util.find_spec(module)
    if spec is None:  # not installed here (the Python 3.9 compat venv has no torch)
        return set()
    assert spec.submodule_search_locations, module
    text = (Path(list(spec.submodule_search_locations)[0]) / relative).read_text()
    return {flag for flag in FLAG.findall(text) if flag not in ("--", "-h", "--help")}


# ("-u" is the python flag torchrun adds to the ranks' command; --local-rank its doc's example)
TORCHRUN = _source_flags("torch", "distributed/run.py") - {"--local-rank", "--local_rank", "-u"}
MSRUN = _source_flags("mindspore", "parallel/cluster/run.py")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    add_arguments(parser)
    return parser


def _options(line: str, **overrides):
    args = _parser().parse_args(line.split())
    return from_arguments(args, **overrides), args


def test_the_peers_flags_are_read_from_their_sources():
    if importlib.util.find_spec("torch") is not None:
        assert {"--standalone", "--rdzv-endpoint", "--nproc-per-node", "--tee"} <= TORCHRUN
    assert {"--worker_num", "--local_worker_num", "--join", "--cluster_time_out"} <= MSRUN


@pytest.mark.parametrize("flag", sorted(TORCHRUN | MSRUN))
def test_every_flag_of_torchrun_and_msrun_is_ours_and_in_the_table(flag):
    ours = {option for action in _parser()._actions for option in action.option_strings}
    assert flag in ours, f"{flag}: neither mapped, accepted nor refused"
    table = (REPO / "docs" / "launch.md").read_text().split("## torchrun and msrun")[1]
    assert f"`{flag}" in table, f"{flag} missing from docs/launch.md's table"


def test_torchrun_readme_command_lines_become_options():
    options, _ = _options("--standalone --nproc-per-node 2 --rdzv-backend c10d --rdzv_id 456 "
                          "--monitor-interval 5 --max_restarts 2 --log_dir L --tee 3")
    assert (options.nnodes, options.nproc, options.job_id, options.max_restarts) == (1, 2, "456", 2)
    assert (options.log_dir, options.show, options.master_port) == ("L", "all", None)
    options, _ = _options("--nnodes 2 --nproc_per_node 4 --rdzv-id job7 --rdzv-backend static "
                          "--rdzv-endpoint 10.0.0.1:29603 --node_rank 1")
    assert (options.nnodes, options.node_rank, options.nproc) == (2, 1, 4)
    assert (options.master_addr, options.master_port, options.job_id) == ("10.0.0.1", 29603, "job7")
    assert _options("--rdzv-endpoint node0")[0].master_port == 29400  # torchrun's default port
    assert _options("--nnodes 2:2 --rdzv-endpoint h:1")[0].nnodes == 2  # fixed: the same size
    # torchrun's stream flags are keyed by LOCAL rank (its LogsSpecs): --show local:...
    assert _options("--redirects 3")[0].show == "none"
    assert _options("--redirects 0")[0].show == "all"
    assert _options("--redirects 0:0,1:3")[0].show == "local:^1"  # unnamed local ranks: 0
    assert _options("--redirects 3 --tee 0:3")[0].show == "local:0"  # teed: shown though redirected
    assert _options("--redirects 1:3,2:3 --tee 2:1")[0].show == "local:^1"
    assert _options("--tee 0:3")[0].show == "all"  # teeing alone hides nothing
    assert _options("--local-ranks-filter 0,1")[0].show == "local:0,1"
    assert _options("--redirects 0:3 --local-ranks-filter 0,1")[0].show == "local:1"
    assert _options("--redirects 3 --tee 3 --local-ranks-filter 1")[0].show == "local:1"
    assert _options("--tee 3 --show 2")[0].show == "2"  # --show written out wins
    assert _options("--shutdown-timeout 9")[0].grace == 9
    assert _options("--nproc-per-node cpu")[0].nproc == usable_cores()
    # `torchrun -m pkg.train ARGS`: the module runs as python -m
    _, args = _options("--nproc-per-node 2 -m pkg.train --lr 1")
    assert command_of(args) == ["python", "-m", "pkg.train", "--lr", "1"]


def test_msrun_sample_command_lines_become_options():
    options, _ = _options("--worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 "
                          "--master_port=8118 --node_rank=0 --log_dir=msrun_log --join=True "
                          "--cluster_time_out=300")
    assert (options.nproc, options.nnodes, options.master_port) == (2, 1, 8118)
    assert (options.log_dir, options.cluster_timeout) == ("msrun_log", 300)
    options, _ = _options("--worker_num 8 --local_worker_num 4 --master_port 8118 --node_rank 1")
    assert (options.nproc, options.nnodes, options.node_rank) == (4, 2, 1)
    assert _options("--worker_num 2")[0].nproc == 2  # one server
    # msrun's default --node_rank -1 on one server: every rank is here, node 0 (msrun ignores it)
    assert _options("--worker_num 2 --local_worker_num 2 --node_rank -1")[0].node_rank == 0
    assert _options("--node_rank=-1 --nproc 2")[0].node_rank == 0
    assert _options("--tail_worker_log 1")[0].show == "1"
    assert _options("--rank_table_file t.json")[0].rank_table == "t.json"


@pytest.mark.parametrize("line, code, words", [
    ("--nnodes=1:2", "LAUNCH_BAD_VALUE", "fixed sizes only; write --nnodes 2"),
    # msrun's -1 (its scheduler numbers the servers as they join): several servers need theirs
    ("--worker_num 4 --local_worker_num 2 --node_rank -1", "LAUNCH_NODE_RANK",
     "give each server its own --node_rank 0..1 (0 on the --master_addr server)"),
    ("--node-rank -2", "LAUNCH_NODE_RANK", ">= 0"),
    ("--worker_num 3 --local_worker_num 2", "LAUNCH_NPROC", "not a multiple"),
    ("--standalone --nnodes 2", "LAUNCH_BAD_VALUE", "--standalone is one server"),
    ("--role trainer", "LAUNCH_PEER_FLAG", "one role per job"),
    ("--bind_core True", "LAUNCH_PEER_FLAG", "taskset or numactl"),
    ("--sim_level 1", "LAUNCH_PEER_FLAG", "MS_SIMULATION_LEVEL"),
    ("--virtual-local-rank", "LAUNCH_PEER_FLAG", "LOCAL_RANK"),
    ("--rank-dir /tmp/{rank_id}", "LAUNCH_RANK_DIR", "below the working folder"),
    ("--rank-dir a/../../{rank_id}", "LAUNCH_RANK_DIR", "below the working folder"),
    ("--rank-dir device", "LAUNCH_RANK_DIR", "{rank_id} or {local_rank}"),
    ("--rank-dir device_{rank}", "LAUNCH_RANK_DIR", "in braces"),
])
def test_refused_with_one_line_saying_what_to_write(line, code, words):
    with pytest.raises(ConfigError) as caught:
        _options(line)
    [problem] = caught.value.problems
    assert problem.code == code and words in problem.message and "\n" not in problem.message


def test_the_choices_the_table_gives(capsys):
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        _options("--rdzv-backend etcd")
    with pytest.raises(ConfigError) as caught:
        _options("--nproc-per-node gpu" if not os.path.exists("/dev/nvidia0") else "--nproc x")
    assert caught.value.problems[0].code == "LAUNCH_NPROC"


def test_every_peer_flag_says_what_it_does_or_what_to_write():
    for peer in PEER_FLAGS:
        assert bool(peer.does) != bool(peer.refused), peer.flags
        assert peer.peer in ("torchrun", "msrun")
    spelled = [flag for f in FIELDS.values() if f.metadata["cli"] for flag in flags_of(f.name)]
    spelled += [flag for peer in PEER_FLAGS for flag in peer.flags]
    assert len(spelled) == len(set(spelled)), "a flag declared twice"


# ---- the plan: the user's variables win, the launcher's defaults fill in --------------------

def _plan(command=("python", "t.py"), base_env=None, cores=2, **options):
    options = {"job_id": "job-1", "log_dir": "/tmp/logs", "cwd": "/work/code",
               "cache_dir": "/tmp/cache", **options}
    return build_plan(list(command), NO_TABLE, LaunchOptions(**options),
                      Host(base_env=dict(base_env or {}), cores=cores))


def test_ms_cluster_timeouts_are_defaults_the_users_values_and_the_flag_override():
    plan = _plan(backend="ms-cluster", nproc=2)
    assert {r.env["MS_TOPO_TIMEOUT"] for r in plan.ranks} == {"120"}  # scheduler too
    plan = _plan(backend="ms-cluster", nproc=2, base_env={"MS_TOPO_TIMEOUT": "900",
                                                          "MS_NODE_TIMEOUT": "30"})
    assert {(r.env["MS_TOPO_TIMEOUT"], r.env["MS_NODE_TIMEOUT"]) for r in plan.ranks} == \
        {("900", "30")}
    plan = _plan(backend="ms-cluster", nproc=2, cluster_timeout=300,
                 base_env={"MS_TOPO_TIMEOUT": "900"})
    assert {r.env["MS_TOPO_TIMEOUT"] for r in plan.ranks} == {"300"}


def test_threads_the_cores_share_unless_the_user_set_them():
    plan = _plan(backend="plain", nproc=2, cores=8)
    assert [r.env["OMP_NUM_THREADS"] for r in plan.ranks] == ["4", "4"]
    assert plan.notes == ("OMP_NUM_THREADS=4 per rank (8 cores / 2 ranks; set it to choose)",)
    plan = _plan(backend="plain", nproc=4, cores=2)
    assert {r.env["OMP_NUM_THREADS"] for r in plan.ranks} == {"1"}  # torchrun's 1, at least
    plan = _plan(backend="plain", nproc=2, cores=8, base_env={"OMP_NUM_THREADS": "3"})
    assert {r.env["OMP_NUM_THREADS"] for r in plan.ranks} == {"3"} and plan.notes == ()
    plan = _plan(backend="plain", nproc=1, cores=8)
    assert "OMP_NUM_THREADS" not in plan.ranks[0].env and plan.notes == ()


def test_torch_ranks_get_torchruns_variables_with_its_values():
    plan = build_plan(["python", "t.py"], NO_TABLE, LaunchOptions(
        job_id="job-1", log_dir="/tmp/logs", cwd="/w", backend="torch", nproc=2, nnodes=2,
        node_rank=1, master_port=29500, max_restarts=3), Host(cores=2), attempt=2)
    env = plan.workers[1].env
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
                                "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT",
                                "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                                "TORCHELASTIC_USE_AGENT_STORE",
                                "TORCH_NCCL_ASYNC_ERROR_HANDLING")} == {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "3", "ROLE_WORLD_SIZE": "4",
        "ROLE_NAME": "default", "TORCHELASTIC_RESTART_COUNT": "1",
        "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "job-1",
        "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert env["TORCHELASTIC_ERROR_FILE"] == "/tmp/logs/job-1/rank_3.attempt2.error.json"


def test_rank_dir_gives_each_rank_its_folder_and_keeps_the_users_paths(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "train.py").write_text("")
    plan = _plan(("python", "train.py", "--data=data", "./data", "out", "-v"), backend="plain",
                 nproc=2, cwd=str(tmp_path), rank_dir="device_{rank_id}")
    for rank in plan.ranks:
        assert rank.cwd == str(tmp_path / f"device_{rank.rank_id}") and rank.fresh_cwd
        assert rank.argv[1:] == (str(tmp_path / "train.py"), f"--data={tmp_path / 'data'}",
                                 str(tmp_path / "data"), "out", "-v")
    assert not (tmp_path / "device_0").exists()  # the plan makes nothing


@pytest.mark.slow
@pytest.mark.parametrize("flags, local", [("--redirects 3 --tee 0:3", 0),
                                          ("--local_ranks_filter 1", 1),
                                          ("--redirects 0:3 --tee 1:0", 1)])
def test_torchruns_stream_flags_pick_local_ranks_on_every_server(tmp_path, flags, local):
    """Two servers on loopback, 2 ranks each, both launched with the same torchrun flags (as
    torchrun is, once per server): each shows its own local rank `local` (global ranks
    `local` and 2 + `local`), the other only in its log."""
    port = free_port_pair()
    procs = [start_cli(["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", str(node),
                        "--master-port", str(port), "--backend", "plain", *flags.split(), "--",
                        PY, str(ASSETS / "server_rank.py"), "env"],
                       tmp_path / f"server{node}", cwd=str(tmp_path)) for node in (0, 1)]
    for node, (code, said) in enumerate(finish_all(procs)):
        assert code == 0, said
        shown = {line.split("]")[0] + "]" for line in said.splitlines() if line.startswith("[rank ")}
        assert shown == {f"[rank {2 * node + local}]"}, said
        for rank in (2 * node, 2 * node + 1):  # every rank's output in its log all the same
            logs = list((tmp_path / f"server{node}").glob(f"*/rank_{rank}.log"))
            assert len(logs) == 1 and "ENV " in logs[0].read_text()
