"""One job across simulated servers (one launcher each, own log folder, loopback) tracked in one
real `mlflow server` on a real PostgreSQL (the session fixture `postgres_mlflow`): one parent
run with every server's children, its end status, `compare` over all ranks from the store.
The rank-table route uses hccl_standin.py as the HCCL stand-in (no NPU or HCCL here)."""
from __future__ import annotations

import json
import subprocess
import uuid

import numpy as np
import psutil
import pytest

from tests.helpers import ASSETS, clean_env, wait_for
from tests.launcher.helpers import (PY, finish_all, free_port_pair, job_processes, kill_jobs,
                                    loopback_table, start_cli)
from tests.tracking.helpers import client
from platform_plugin.tracking.sinks import mlflow_job

RANK = str(ASSETS / "launch" / "server_rank.py")
STANDIN = str(ASSETS / "launch" / "hccl_standin.py")
pytestmark = pytest.mark.slow


def _env(uri, experiment, **extra):
    return clean_env(MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME=experiment,
                     PLATFORM_TRACKING_DRAIN_TIMEOUT="90", **extra)


def _start_servers(tmp_path, uri, nnodes, args, experiment):
    """One tracked launcher per simulated server (2 ranks each), all at the same instant."""
    port = free_port_pair()
    return [start_cli(["--tracking", "mlflow", "--nproc", "2", "--nnodes", str(nnodes),
                       "--node-rank", str(n), "--master-port", str(port), "--backend", "plain",
                       "--show", "none", "--", PY, RANK, *args], tmp_path / f"server{n}",
                      cwd=str(tmp_path), env=_env(uri, experiment))
            for n in range(nnodes)]


def _grid_job(tmp_path, uri, nnodes, args, experiment):
    return finish_all(_start_servers(tmp_path, uri, nnodes, args, experiment), timeout=150)


def _kill_all(procs, tmp_path) -> None:
    """The launchers and whatever their jobs left running (a test that failed half-way)."""
    for proc in procs:
        proc.kill()
    kill_jobs(tmp_path / f"server{node}" for node in range(len(procs)))


def _rank_runs_made(c, experiment, count: int):
    """Wait until the experiment holds `count` rank runs (the helpers made them); returns it."""
    def made():
        exp = c.get_experiment_by_name(experiment)
        runs = exp and c.search_runs([exp.experiment_id], "tags.rank_id != ''")
        return exp if runs and len(runs) == count else None
    return wait_for(made, timeout=120, interval=0.5, what=f"the {count} rank runs")


def _parents(c, experiment):
    """The job's parent runs once the forwarding helpers (which end the runs after the
    launchers returned) are done with them."""
    def ended():
        exp = c.get_experiment_by_name(experiment)
        runs = exp and c.search_runs([exp.experiment_id], f"tags.`{mlflow_job.ROLE_TAG}` = 'job'")
        return (runs, exp) if runs and all(r.info.status != "RUNNING" for r in runs) else None
    return wait_for(ended, timeout=120, interval=0.5, what="the parent run ended")


def _children(c, exp, parent):
    return mlflow_job.job_children(c, exp.experiment_id, parent.info.run_id)


def _one_point_per_step(c, run_id, key) -> dict[int, float]:
    """The run's history of `key` as step -> value, checked to hold one point per step (one
    job-wide aggregate, not one per server)."""
    history = c.get_metric_history(run_id, key)
    steps = [m.step for m in history]
    assert len(steps) == len(set(steps)), f"{key}: {sorted(steps)}"
    return {m.step: m.value for m in history}


def _assert_job_wide_aggregates(c, parent, children, metric="loss"):
    """The parent's NAME/mean|min|max: one point per step, over every rank of every server
    (numpy over the children's histories in the store)."""
    per_rank = [_one_point_per_step(c, r.info.run_id, metric) for r in children]
    steps = sorted({s for rank in per_rank for s in rank})
    assert steps
    for stat, numpy_stat in (("mean", np.mean), ("min", np.min), ("max", np.max)):
        got = _one_point_per_step(c, parent.info.run_id, f"{metric}/{stat}")
        want = {s: float(numpy_stat([rank[s] for rank in per_rank if s in rank])) for s in steps}
        assert sorted(got) == steps, stat
        assert got == pytest.approx(want, rel=1e-12), stat


def _compare(tmp_path, args, uri):
    return subprocess.run([PY, "-m", "platform_plugin", "compare", *args], capture_output=True,
                          text=True, timeout=120, cwd=str(tmp_path),
                          env=_env(uri, "unused"))


def test_four_servers_one_parent_every_child_and_one_comparison(tmp_path, postgres_mlflow):
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    outs = _grid_job(tmp_path, postgres_mlflow, 4, ["train"], experiment)
    assert all(code == 0 for code, _ in outs), outs
    c = client(postgres_mlflow)
    [parent], exp = _parents(c, experiment)  # launchers raced at the same instant: one parent
    assert parent.info.status == "FINISHED"
    assert {k: v for k, v in parent.data.tags.items() if k.startswith(mlflow_job.SERVER_TAG)} == \
        {f"{mlflow_job.SERVER_TAG}node{n}": "FINISHED" for n in range(4)}
    children = _children(c, exp, parent)
    assert sorted((r.data.tags["rank_id"], r.data.tags["server_id"]) for r in children) == \
        sorted((str(r), f"node{r // 2}") for r in range(8))
    assert all(c.get_run(r.info.run_id).info.status == "FINISHED" for r in children)
    [job_dir] = list((tmp_path / "server0").iterdir())
    shown = _compare(tmp_path, [job_dir.name, "--log-dir", str(tmp_path / "server0"), "--url"],
                     postgres_mlflow)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()  # the headline, how the job ended, then its servers
    assert lines[1] == "ended: succeeded" and "server" in lines[2], shown.stdout
    rows = [line.split()[:2] for line in shown.stdout.splitlines() if line.startswith("rank-0")]
    assert rows == [[f"rank-0{r}", f"node{r // 2}"] for r in range(8)], shown.stdout
    assert all(r.info.run_id in shown.stdout for r in children)  # the URL overlays all 8
    # a job id with no folder on this machine: found in the store by its tag
    elsewhere = _compare(tmp_path, [job_dir.name, "--log-dir", str(tmp_path / "nothing")],
                         postgres_mlflow)
    assert elsewhere.returncode == 0 and "rank-07" in elsewhere.stdout, elsewhere.stderr


def test_a_failed_server_fails_the_parent_and_names_the_server(tmp_path, postgres_mlflow):
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    outs = _grid_job(tmp_path, postgres_mlflow, 2, ["fail-on", "3"], experiment)
    try:
        assert [code for code, _ in outs] == [1, 1], outs
    finally:
        kill_jobs(tmp_path / f"server{node}" for node in (0, 1))
    c = client(postgres_mlflow)
    [parent], exp = _parents(c, experiment)
    assert parent.info.status == "FAILED"
    assert parent.data.tags[mlflow_job.FAILED_SERVERS_TAG] == "node0, node1"
    assert parent.data.tags[mlflow_job.SERVER_TAG + "node1"].startswith("FAILED: rank 3 exit 3")
    assert "stopped because server node1" in parent.data.tags[mlflow_job.SERVER_TAG + "node0"]
    assert len(_children(c, exp, parent)) == 4


def _table_servers(tmp_path, uri, table, args, experiment, devices=2):
    """One tracked launcher per server of a loopback rank table, all at the same instant."""
    port = free_port_pair()
    servers = len(json.loads(table.read_text())["server_list"])
    return [start_cli(["--tracking", "mlflow", "--backend", "rank-table", "--show", "none",
                       "--", PY, *args], tmp_path / f"server{n}", cwd=str(tmp_path),
                      env=_env(uri, experiment, RANK_TABLE_FILE=str(table),
                               RANK_START=str(devices * n), PLATFORM_RUN_MODE="full",
                               PLATFORM_CONTROL_PORT=str(port)))
            for n in range(servers)]


def test_rank_table_servers_share_one_parent(tmp_path, postgres_mlflow):
    """The table's first server sends the job id and the experiment over the job link: one
    parent, found by its job-id tag (mlflow_job.py), every rank a child."""
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    table = loopback_table(tmp_path, 2, 2)
    outs = finish_all(_table_servers(tmp_path, postgres_mlflow, table, [STANDIN], experiment),
                      timeout=150)
    assert all(code == 0 for code, _ in outs), outs
    c = client(postgres_mlflow)
    [parent], exp = _parents(c, experiment)
    assert parent.info.status == "FINISHED"
    children = _children(c, exp, parent)
    assert sorted(int(r.data.tags["rank_id"]) for r in children) == list(range(4))
    servers = {s["server_id"] for s in json.loads(table.read_text())["server_list"]}
    assert {r.data.tags["server_id"] for r in children} == servers and len(servers) == 2


def test_rank_table_server_failure_stops_the_other_server_over_the_job_link(
        tmp_path, postgres_mlflow):
    """The failing server tells the table's first server over the job link (the tracking store
    carries no stop): the other server's ranks, which would sleep 120 s, stop; the parent run
    ends FAILED naming both. (server_rank.py instead of the HCCL stand-in: what fails here is
    the script, not HCCL.)"""
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    table = loopback_table(tmp_path, 2, 2)
    outs = finish_all(_table_servers(tmp_path, postgres_mlflow, table, [RANK, "fail-on", "3"],
                                     experiment), timeout=90)
    try:
        assert [code for code, _ in outs] == [1, 1], outs
    finally:
        kill_jobs(tmp_path / f"server{node}" for node in (0, 1))
    servers = [s["server_id"] for s in json.loads(table.read_text())["server_list"]]
    assert f"stopped because server {servers[1]}: rank 3" in outs[0][1]
    c = client(postgres_mlflow)
    [parent], _ = _parents(c, experiment)
    assert parent.info.status == "FAILED"
    assert parent.data.tags[mlflow_job.FAILED_SERVERS_TAG] == ", ".join(sorted(servers))
    assert not any(k.startswith("platform.stop.") for k in parent.data.tags)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_servers_in_differently_named_folders_make_one_job(tmp_path, store, request):
    """Two launchers of one job in project folders n0-*/ and n1-*/ (each would track into an
    experiment named after its folder); node 1 also has its own MLFLOW_EXPERIMENT_NAME. Node 0's
    experiment wins (node 1 says so once): one parent, FINISHED, every rank a child, and
    `compare` from node 1's folder shows every rank."""
    tag = uuid.uuid4().hex[:8]
    uri = (f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}" if store == "sqlite"
           else request.getfixturevalue("postgres_mlflow"))
    (tmp_path / "shared").mkdir()
    port, folders = free_port_pair(), [tmp_path / f"n{n}-{tag}" for n in (0, 1)]
    procs = []
    for node, folder in enumerate(folders):
        folder.mkdir()
        env = clean_env(MLFLOW_TRACKING_URI=uri, PLATFORM_TRACKING_DRAIN_TIMEOUT="90",
                        **({"MLFLOW_EXPERIMENT_NAME": f"other-{tag}"} if node else {}))
        procs.append(start_cli(["--tracking", "mlflow", "--nproc", "2", "--nnodes", "2",
                                "--node-rank", str(node), "--master-port", str(port),
                                "--backend", "plain", "--show", "none", "--", PY, RANK, "train"],
                               folder / "logs", cwd=str(folder), env=env))
    outs = finish_all(procs, timeout=150)
    assert [code for code, _ in outs] == [0, 0], outs
    assert outs[1][1].count(f"MLFLOW_EXPERIMENT_NAME='other-{tag}' here, but the job tracks "
                            f"into node 0's experiment 'n0-{tag}'") == 1, outs[1][1]
    c = client(uri)
    [parent], exp = _parents(c, f"n0-{tag}")
    assert parent.info.status == "FINISHED"
    children = _children(c, exp, parent)
    assert sorted(r.data.tags["rank_id"] for r in children) == ["0", "1", "2", "3"]
    # server_rank.py train: rank r logs loss = 1/(step+1) + r at steps 0..19
    want = {s: float(np.mean([1.0 / (s + 1) + r for r in range(4)])) for s in range(20)}
    assert _one_point_per_step(c, parent.info.run_id, "loss/mean") == pytest.approx(want, rel=1e-12)
    _assert_job_wide_aggregates(c, parent, children)
    assert c.get_experiment_by_name(f"n1-{tag}") is None
    assert c.get_experiment_by_name(f"other-{tag}") is None
    [job_dir] = list((folders[1] / "logs").iterdir())
    shown = _compare(folders[1], [job_dir.name, "--log-dir", str(folders[1] / "logs")], uri)
    assert shown.returncode == 0, shown.stderr
    assert [line.split()[0] for line in shown.stdout.splitlines()
            if line.startswith("rank-")] == [f"rank-0{r}" for r in range(4)], shown.stdout


def test_a_server_whose_launcher_is_killed_is_reported_for_and_the_parent_ends(
        tmp_path, postgres_mlflow):
    """Node 1's launcher is SIGKILLed while its ranks run: it never tags its end on the parent,
    which stayed RUNNING for good (node 0 reported, then waited for node 1's word), and so did
    node 1's rank runs. Node 0 saw it go over the job link: it reports node 1 FAILED and ends
    node 1's runs, so the parent ends FAILED naming both servers."""
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    procs = _start_servers(tmp_path, postgres_mlflow, 2, ["fail-on", "99"], experiment)
    c = client(postgres_mlflow)
    try:
        _rank_runs_made(c, experiment, 4)
        procs[1].kill()
        [(code, out)] = finish_all(procs[:1], timeout=90)  # its ranks would sleep 120 s
        assert code == 1 and "server node1: its launcher is gone" in out, out
    finally:
        _kill_all(procs, tmp_path)
    [parent], exp = _parents(c, experiment)
    assert parent.info.status == "FAILED"
    assert parent.data.tags[mlflow_job.FAILED_SERVERS_TAG] == "node0, node1"
    assert "its launcher is gone" in parent.data.tags[mlflow_job.SERVER_TAG + "node1"]
    children = _children(c, exp, parent)
    assert len(children) == 4
    assert all(c.get_run(r.info.run_id).info.status == "FAILED" for r in children)
    _assert_job_wide_aggregates(c, parent, children)  # no server's partial ones left behind


def test_rank_table_a_server_whose_launcher_is_killed_is_reported_for(tmp_path, postgres_mlflow):
    """The rank-table route's killed server: the table's first server sees it go over the job
    link, reports it FAILED on the parent (by its table id) and ends its rank runs."""
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    table = loopback_table(tmp_path, 2, 2)
    servers = [s["server_id"] for s in json.loads(table.read_text())["server_list"]]
    procs = _table_servers(tmp_path, postgres_mlflow, table, [RANK, "fail-on", "99"], experiment)
    c = client(postgres_mlflow)
    try:
        _rank_runs_made(c, experiment, 4)
        procs[1].kill()
        [(code, out)] = finish_all(procs[:1], timeout=90)  # its ranks would sleep 120 s
        assert code == 1 and "its launcher is gone" in out, out
    finally:
        _kill_all(procs, tmp_path)
    [parent], exp = _parents(c, experiment)
    assert parent.info.status == "FAILED"
    assert "its launcher is gone" in parent.data.tags[mlflow_job.SERVER_TAG + servers[1]]
    assert all(c.get_run(r.info.run_id).info.status == "FAILED"
               for r in _children(c, exp, parent))


def _helper_of(job_folder) -> psutil.Process:
    """The forwarding helper of the job in `job_folder` (its own session: not the launcher's
    child tree once the launcher is gone)."""
    def found():
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if "platform_plugin.tracking.delivery.helper" in cmdline and \
                    any(arg.startswith(str(job_folder)) for arg in cmdline):
                return proc
        return None
    return wait_for(found, timeout=60, what="the forwarding helper")


def test_a_server_lost_while_it_finishes_its_tracking_is_reported_by_the_others(
        tmp_path, postgres_mlflow):
    """Node 1's whole server is lost (its launcher and its forwarding helper SIGKILLed) while
    its launcher waits for its ranks' last points to be delivered, after node 0 had reported
    its own end on the parent. Node 0's end record could not name node 1, so nobody reported
    it: the parent and node 1's rank runs stayed RUNNING for good. Node 0 reports it once the
    job link says it is gone. (Node 1's helper is stopped with SIGSTOP before the last points,
    to hold that wait open: PLATFORM_TRACKING_DRAIN_TIMEOUT is 90 s here.)"""
    experiment, go = f"ms-{uuid.uuid4().hex[:8]}", tmp_path / "go"
    procs = _start_servers(tmp_path, postgres_mlflow, 2, ["until", str(go)], experiment)
    c = client(postgres_mlflow)
    try:
        exp = _rank_runs_made(c, experiment, 4)
        helper = _helper_of(tmp_path / "server1")
        helper.suspend()
        go.touch()  # every rank logs 5 points and ends: node 1's wait for their delivery hangs

        def node_0_reported():
            parents = c.search_runs([exp.experiment_id], f"tags.`{mlflow_job.ROLE_TAG}` = 'job'")
            return parents and mlflow_job.SERVER_TAG + "node0" in parents[0].data.tags
        wait_for(node_0_reported, timeout=120, interval=0.5, what="node 0's end on the parent")
        procs[1].kill()
        helper.kill()  # the server is lost
        [(code, out)] = finish_all(procs[:1], timeout=90)
        assert code == 1 and "server(s) node1 failed" in out, out
        assert "node1 vanished after this server's tracking had finished: reported FAILED" in out
    finally:
        _kill_all(procs, tmp_path)
    [parent], exp = _parents(c, experiment)
    assert parent.info.status == "FAILED"
    assert parent.data.tags[mlflow_job.SERVER_TAG + "node0"] == "FINISHED"
    assert "its launcher is gone" in parent.data.tags[mlflow_job.SERVER_TAG + "node1"]
    assert parent.data.tags[mlflow_job.FAILED_SERVERS_TAG] == "node1"
    status = {r.data.tags["rank_id"]: c.get_run(r.info.run_id).info.status
              for r in _children(c, exp, parent)}
    assert status == {"0": "FINISHED", "1": "FINISHED", "2": "FAILED", "3": "FAILED"}
    # the parent ended with node 0's ranks' points only: one job-wide aggregate per step
    assert sorted(_one_point_per_step(c, parent.info.run_id, "loss/mean")) == list(range(5))
    # node 1's points, never delivered, go with a late sync: the parent ends again (node 1's
    # own word), its aggregates computed again over all four ranks
    [job_dir] = list((tmp_path / "server1").iterdir())
    synced = subprocess.run([PY, "-m", "platform_plugin", "sync", str(job_dir), "--wait", "30"],
                            capture_output=True, text=True, timeout=180, cwd=str(tmp_path),
                            env=_env(postgres_mlflow, experiment))
    assert synced.returncode == 0 and "runs ended" in synced.stdout, synced.stdout + synced.stderr
    for stat, numpy_stat in (("mean", np.mean), ("min", np.min), ("max", np.max)):
        values: dict[int, list[float]] = {}
        for m in c.get_metric_history(parent.info.run_id, f"loss/{stat}"):
            values.setdefault(m.step, []).append(m.value)
        for step in range(5):  # server_rank.py: rank r logs loss = 1/(step+1) + r
            whole = float(numpy_stat([1.0 / (step + 1) + r for r in range(4)]))
            assert any(v == pytest.approx(whole, rel=1e-12) for v in values[step]), (stat, values)


def _scale_job(tmp_path, uri, launchers, ranks, args, experiment, env_extra=None):
    """`launchers` tracked launchers of `ranks` ranks each on loopback, all started at once."""
    port = free_port_pair()
    env = _env(uri, experiment, **(env_extra or {}))
    return [start_cli(["--tracking", "mlflow", "--nproc", str(ranks), "--nnodes", str(launchers),
                       "--node-rank", str(n), "--master-port", str(port), "--backend", "plain",
                       "--show", "none", "--no-system-metrics", "--", PY, RANK, *args],
                      tmp_path / f"server{n}", cwd=str(tmp_path), env=env)
            for n in range(launchers)]


def test_32_servers_one_job_one_parent_every_rank_a_child(tmp_path, postgres_mlflow):
    """32 launchers x 1 rank into the team server: one job id, one parent FINISHED, 32
    children, one per server."""
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    procs = _scale_job(tmp_path, postgres_mlflow, 32, 1, ["train", "5"], experiment)
    try:
        outs = finish_all(procs, timeout=600)
    finally:
        _kill_all(procs, tmp_path)
    assert [code for code, _ in outs] == [0] * 32, [o for o in outs if o[0]]
    assert len({d.name for n in range(32) for d in (tmp_path / f"server{n}").iterdir()}) == 1
    c = client(postgres_mlflow)
    [parent], exp = _parents(c, experiment)
    assert parent.info.status == "FINISHED"
    children = _children(c, exp, parent)
    assert sorted((int(r.data.tags["rank_id"]), r.data.tags["server_id"]) for r in children) == \
        [(n, f"node{n}") for n in range(32)]


def test_8_servers_of_8_a_failure_on_the_last_stops_them_all(tmp_path, postgres_mlflow):
    """8 launchers x 8 ranks: rank 63 (the last server) fails after 1 s; every other rank would
    sleep 120 s. Every launcher stops and names node7; one parent, FAILED, 64 children.
    (How fast: bench/multiserver_scale.py, docs/benchmarks.md.)"""
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    procs = _scale_job(tmp_path, postgres_mlflow, 8, 8, ["fail-on", "63"], experiment)
    try:
        outs = finish_all(procs, timeout=300)  # far below the healthy ranks' 120 s sleep + drain
    finally:
        _kill_all(procs, tmp_path)
    assert [code for code, _ in outs] == [1] * 8, outs
    assert all("stopped because server node7: rank 63" in out for _, out in outs[:7]), outs
    c = client(postgres_mlflow)
    [parent], exp = _parents(c, experiment)
    assert parent.info.status == "FAILED"
    assert sorted(int(r.data.tags["rank_id"]) for r in _children(c, exp, parent)) == \
        list(range(64))


def test_a_frozen_server_is_detected_within_the_heartbeat_deadline(tmp_path, postgres_mlflow):
    """Node 2's launcher is frozen (SIGSTOP: a hung machine or a network partition looks the
    same) while every rank runs: nodes 0 and 1 end non-zero within the heartbeat deadline (5 s
    here) plus grace, naming node2, nothing of theirs left running; the parent ends FAILED."""
    experiment = f"ms-{uuid.uuid4().hex[:8]}"
    procs = _scale_job(tmp_path, postgres_mlflow, 3, 1, ["fail-on", "99"], experiment,
                       {"PLATFORM_HEARTBEAT_TIMEOUT": "5"})
    c = client(postgres_mlflow)
    frozen = psutil.Process(procs[2].pid)
    try:
        _rank_runs_made(c, experiment, 3)
        frozen.suspend()
        outs = finish_all(procs[:2], timeout=60)  # the ranks would sleep 120 s
        assert [code for code, _ in outs] == [1, 1], outs
        assert all("node2" in out and "silent" in out for _, out in outs), outs
        for node in (0, 1):
            [job_dir] = list((tmp_path / f"server{node}").iterdir())
            assert not job_processes(str(job_dir)), f"node {node} left its ranks running"
    finally:
        frozen.resume()
        _kill_all(procs, tmp_path)
    [parent], _ = _parents(c, experiment)
    assert parent.info.status == "FAILED" and "node2" in parent.data.tags[
        mlflow_job.FAILED_SERVERS_TAG]
