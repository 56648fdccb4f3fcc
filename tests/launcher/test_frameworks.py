"""Real MindSpore (dynamic cluster, CPU/mccl) and torch (gloo DDP) jobs, single and multi-node.

Multi-node: two launchers on this machine (node 0 and node 1 on 127.0.0.1) form one job."""
from __future__ import annotations

import pytest

from platform_plugin import launch
from tests.launcher.helpers import (ASSETS, PY, free_port_pair, job_processes, kill_job, log_text,
                                    results, start_cli, wait_no_processes)

MS_SCRIPT = str(ASSETS / "ms_allreduce.py")
TORCH_SCRIPT = str(ASSETS / "torch_ddp.py")
pytestmark = pytest.mark.slow


def _communicate(procs, timeout=240):
    outs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            outs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return outs


def _job_dirs(log_dir):
    return sorted(str(d) for d in log_dir.iterdir() if d.is_dir())


def test_mindspore_two_ranks_end_identical(tmp_path):
    result = launch(["python", MS_SCRIPT], nproc=2, tracking="none", log_dir=str(tmp_path),
                    timeout=200, show="0", write=lambda s: None, cwd=str(tmp_path))
    assert result.backend == "ms-cluster" and result.ok
    assert set(result.exitcodes) == {"sched", "0", "1"} and result.exitcodes["sched"] == 0
    out = results(result.job_dir, ["0", "1"])
    assert [out[r]["rank"] for r in ("0", "1")] == [0, 1]  # MindSpore's rank == RANK_ID
    assert out["0"]["allreduce"] == out["1"]["allreduce"] == [3.0]
    assert out["0"]["weights"] == out["1"]["weights"]  # data parallel: bit-identical
    assert out["0"]["losses"] != out["1"]["losses"]  # ... on different data
    assert job_processes(result.job_dir) == []


def test_torch_ddp_two_ranks_through_the_cli(tmp_path):
    [(code, out, err)] = _communicate([start_cli(["--nproc", "2", "--backend", "torch",
                                                  "--timeout", "200", "--", PY, TORCH_SCRIPT],
                                                 tmp_path)])
    assert code == 0, out + err
    [job_dir] = _job_dirs(tmp_path)
    res = results(job_dir, ["0", "1"])
    assert res["0"]["world"] == 2 and res["0"]["weights"] == res["1"]["weights"]


@pytest.mark.parametrize("backend, script", [("torch", TORCH_SCRIPT), ("ms-cluster", MS_SCRIPT)])
def test_two_launchers_form_one_four_rank_job(tmp_path, backend, script):
    port = free_port_pair()
    nodes = []
    for node in (0, 1):
        log_dir = tmp_path / f"node{node}"
        log_dir.mkdir()
        nodes.append(start_cli(["--nproc", "2", "--nnodes", "2", "--node-rank", str(node),
                                "--master-addr", "127.0.0.1", "--master-port", str(port),
                                "--backend", backend, "--timeout", "280", "--show", "none",
                                "--", PY, script], log_dir, cwd=str(tmp_path)))
    outcome = _communicate(nodes, timeout=300)
    dirs = [_job_dirs(tmp_path / f"node{n}")[0] for n in (0, 1)]
    try:
        for code, out, err in outcome:
            assert code == 0, out + err
        res = {**results(dirs[0], ["0", "1"]), **results(dirs[1], ["2", "3"])}
        assert sorted(res) == ["0", "1", "2", "3"]
        assert all(r["weights"] == res["0"]["weights"] for r in res.values())
        if backend == "ms-cluster":
            assert all(r["allreduce"] == [10.0] for r in res.values())  # 1+2+3+4
            assert log_text(dirs[0], "sched") and not log_text(dirs[1], "sched")
    finally:
        for job_dir in dirs:
            assert wait_no_processes(job_dir, timeout=10) == []
            kill_job(job_dir)
