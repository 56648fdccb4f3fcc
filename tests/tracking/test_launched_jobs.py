"""Tracking through the real launcher: real rank processes (MindSpore, torch, plain Python), a
real MLflow store and a real `mlflow server` that gets killed and restarted."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from platform_plugin.launcher import launch
from tests.helpers import copy_tracking_asset
from tests.tracking.helpers import MlflowServer, child_runs, client, wait_for

pytestmark = pytest.mark.slow
QUIET = {"write": lambda text: None,  # the launcher's display; rank logs stay in the job folder
         "no_system_metrics": True}  # the ranks' own records (counted here)


def run_job(script: str, tmp_path: Path, **kwargs):
    copy_tracking_asset(script, tmp_path)
    return launch([sys.executable, script], nproc=2, cwd=str(tmp_path), **QUIET, **kwargs)


@pytest.mark.compat  # make test-compat: the 2-rank MindSpore job on Python 3.9, MLflow 3.1
def test_mindspore_callback_job_on_the_ms_cluster_backend(tracking_env, tmp_path):
    # system metrics off: this test counts exactly the records the callback logs
    result = run_job("ms_train.py", tmp_path, backend="ms-cluster")
    report = result.tracking
    assert result.ok and result.backend == "ms-cluster"
    per_rank = 4 + 2 * 8 + 2 * 4  # params, a loss per step, 4 metrics per epoch
    assert (report.delivered, report.pending, report.reason) == (2 * per_rank, 0, "")
    assert report.wait_ended()  # the helper ends the runs after launch() returned
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = c.get_run(report.parent_run_id)
    assert parent.info.run_name == result.job_id and parent.info.status == "FINISHED"
    assert parent.data.tags["backend"] == "ms-cluster" and parent.data.tags["job_id"] == result.job_id
    children = child_runs(c, report.parent_run_id)
    assert [r.info.run_name for r in children] == ["rank-00", "rank-01"]
    for rank, run in enumerate(children):
        assert run.data.tags["rank_id"] == str(rank) and run.info.status == "FINISHED"
        assert run.data.params == {"epochs": "2", "steps_per_epoch": "8", "batch_size": "16",
                                   "optimizer": "SGD"}
        assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(1, 17))
        for name in ("epoch_loss", "epoch_time_s", "samples_per_s", "learning_rate"):
            assert [m.step for m in c.get_metric_history(run.info.run_id, name)] == [1, 2], name
        assert run.data.metrics["learning_rate"] == pytest.approx(0.05)
        logs = c.list_artifacts(run.info.run_id, "logs")
        assert [a.path for a in logs] == [f"logs/rank_{rank}.log"]


def test_torch_loop_job(tracking_env, tmp_path):
    result = run_job("torch_train.py", tmp_path, backend="torch")
    report = result.tracking
    assert result.ok and report.pending == 0
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    children = child_runs(c, report.parent_run_id)
    assert [r.info.run_name for r in children] == ["rank-00", "rank-01"]
    for run in children:
        for name in ("loss", "step_time_s", "samples_per_s"):
            assert sorted(m.step for m in c.get_metric_history(run.info.run_id, name)) == list(range(1, 21))
        assert [m.step for m in c.get_metric_history(run.info.run_id, "epoch_loss")] == [0, 1]
        assert run.data.params == {"lr": "0.05", "batch": "8"}


PLAIN = """
import os, sys, time
from platform_plugin import tracking
t = tracking.get_tracker()
rank = int(os.environ["RANK_ID"])
t.log_param("learning", 0.01)
for step in range(20):
    t.log_metric("loss", 1.0 / (step + 1) + rank)
"""


def test_flat_layout_and_wflogger_through_the_launcher(tracking_env, tmp_path, wflogger_standin):
    (tmp_path / "plain.py").write_text(PLAIN)
    tracking_env.setenv("PLATFORM_TRACKING_LAYOUT", "flat")
    result = launch([sys.executable, "plain.py"], nproc=2, cwd=str(tmp_path), tracking="mlflow", **QUIET)
    assert result.tracking.wait_ended()
    run = client(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(result.tracking.parent_run_id)
    assert set(run.data.params) == {"learning-0", "learning-1"}
    assert set(run.data.metrics) == {"loss-0", "loss-1"} and run.data.metrics["loss-1"] == pytest.approx(1.05)

    # The platform SDK is private: tests/assets/tracking/wf_analyse is a STAND-IN recording calls.
    calls = wflogger_standin
    result = launch([sys.executable, "plain.py"], nproc=2, cwd=str(tmp_path), tracking="wflogger", **QUIET)
    assert result.tracking.sink == "wflogger" and result.tracking.delivered == 42
    names = [json.loads(x)["name"] for x in calls.read_text().splitlines()]
    assert sorted(set(names)) == ["learning-0", "learning-1", "loss-0", "loss-1"]
    assert names.count("loss-0") == names.count("loss-1") == 20


PAUSING = """
import os, time
from pathlib import Path
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(60):
    if step == 20:
        t.flush()
        while not Path("resume").exists():  # the test kills the server meanwhile
            time.sleep(0.05)
    t.log_metric("loss", 1.0 / (step + 1))
print("all 60 steps done", flush=True)
"""


def delivered_per_stream(tmp_path: Path) -> dict[str, int]:
    """What the launcher's forwarder has confirmed (its offset files), by stream."""
    found = {}
    for state in (tmp_path / "platform_logs").glob("*/tracking/rank_*.state.json"):
        try:
            found[state.name.split(".")[0]] = json.loads(state.read_text())["delivered"]
        except (OSError, ValueError, KeyError):  # not written yet
            pass
    return found


@pytest.mark.parametrize("bulk", [False, True], ids=["plain-server", "bulk-route-rest-calls"])
def test_dead_server_mid_run_then_sync_delivers_exactly_once(tracking_env, tmp_path, bulk):
    server = MlflowServer(tmp_path, bulk=bulk)
    try:
        server.start()
        tracking_env.setenv("MLFLOW_TRACKING_URI", server.url)
        tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "3")
        (tmp_path / "pausing.py").write_text(PAUSING)
        outcome = {}
        job = threading.Thread(target=lambda: outcome.update(
            # (QUIET: no system metrics: their samples, into the same streams, would make the
            # delivered counts below depend on when the first batch went)
            result=launch([sys.executable, "pausing.py"], nproc=2, cwd=str(tmp_path), **QUIET)))
        job.start()
        c = client(server.url)

        def first_points_arrived():
            runs = c.search_runs([e.experiment_id for e in c.search_experiments()],
                                 filter_string="tags.rank_id != ''")
            return len(runs) == 2 and all(len(c.get_metric_history(r.info.run_id, "loss")) == 20 for r in runs)

        wait_for(first_points_arrived, timeout=120, what="20 points per rank in MLflow")
        # MLflow shows a batch once it is committed, a moment before the forwarder has its
        # response and writes the offset: killing the server inside that moment would leave the
        # forwarder in MLflow's HTTP retries (minutes). Kill once the offsets say 20 per rank.
        wait_for(lambda: delivered_per_stream(tmp_path) == {"rank_0": 20, "rank_1": 20}, timeout=120,
                 what="the forwarder's offset files to confirm 20 points per rank")
        server.kill()
        (tmp_path / "resume").touch()
        job.join(timeout=300)
        result = outcome["result"]
        assert result.ok, "training must not notice the dead server"
        report = result.tracking
        assert (report.delivered, report.pending) == (40, 80), report.reason
        assert "unreachable" in report.reason and f"platform-run sync {result.job_id}" in report.reason
        assert report.wait_ended()  # the helper gave up at the deadline: runs left open for sync
        if bulk:  # the helper sent through the route, i.e. made its runs with the REST calls
            logs = list((tmp_path / "platform_logs").glob("*/tracking/helper.log"))
            assert logs and not any("has no bulk metrics route" in p.read_text() for p in logs)

        # sync first, the server back later (same port, held meanwhile; same store): sync keeps
        # retrying while the server starts, then delivers exactly what is missing
        sync = subprocess.Popen([str(Path(sys.executable).with_name("platform-run")), "sync", result.job_id,
                                 "--wait", "240"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            server.start()
            out, err = sync.communicate(timeout=300)
        finally:
            if sync.poll() is None:
                sync.kill()
                sync.wait()
        assert sync.returncode == 0, out + err
        assert "sent 80 now; delivered 120, pending 0" in out and "runs ended" in out, out
        for run in child_runs(c, report.parent_run_id):
            assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(60))
            assert c.get_run(run.info.run_id).info.status == "FINISHED"
        again = subprocess.run([str(Path(sys.executable).with_name("platform-run")), "sync", result.job_id],
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "sent 0 now; delivered 120, pending 0" in again.stdout, \
            again.stdout + again.stderr
    finally:
        server.close()


DYING = """
import os, signal, time
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(30):
    t.log_metric("loss", float(step))
# no flush() call: the tracker's 0.2 s timer must write the points. Poll the spool (bounded)
# rather than sleep a fixed time, which a loaded machine can outlast before the timer runs.
deadline = time.monotonic() + 120
while t.spool_path.read_bytes().count(b"\\n") < 30 and time.monotonic() < deadline:
    time.sleep(0.05)
if os.environ["RANK_ID"] == "1":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(120)  # rank 0 waits to be stopped by the launcher
"""


def test_sigkilled_rank_keeps_its_earlier_points(tracking_env, tmp_path):
    (tmp_path / "dying.py").write_text(DYING)
    result = launch([sys.executable, "dying.py"], nproc=2, cwd=str(tmp_path), check=False, grace=1, **QUIET)
    assert not result.ok
    report = result.tracking
    assert (report.delivered, report.pending) == (60, 0), report.reason
    assert report.wait_ended()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for run in child_runs(c, report.parent_run_id):
        assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(30))
        assert run.info.status == "FAILED"
    assert c.get_run(report.parent_run_id).info.status == "FAILED"


EARLY = """
import time
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(40):
    t.log_metric("loss", float(step))
t.flush()
time.sleep(120)  # killed with the launcher
"""


def test_launcher_sigkilled_before_its_helper_started_then_sync_delivers_exactly_once(
        tracking_env, tmp_path):
    """The forwarding helper starts once the ranks ran 0.5 s: a launcher SIGKILLed sooner leaves
    no runs, only spools. The ranks die with it (lifeline); `platform-run sync --end FAILED`
    creates the runs and delivers every point once. (On a loaded machine the kill can come after
    the helper started: then the helper delivers for the drain deadline and sync sends what is
    left - the same end state, which is what the test checks.)"""
    from tests.launcher.helpers import job_processes
    (tmp_path / "early.py").write_text(EARLY)
    cli = str(Path(sys.executable).with_name("platform-run"))
    env = dict(os.environ, PLATFORM_TRACKING_DRAIN_TIMEOUT="5")
    launcher = subprocess.Popen([cli, "launch", "--nproc", "2", "--backend", "plain", "--show", "none", "--no-system-metrics",
                                 "--", sys.executable, "early.py"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    logs = tmp_path / "platform_logs"
    spooled = lambda: sum(p.read_bytes().count(b"\n") for p in logs.glob("*/tracking/rank_*.jsonl"))  # noqa: E731
    try:
        wait_for(lambda: spooled() == 80, timeout=120, interval=0.01, what="both ranks' 40 points spooled")
    finally:
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
    job_dir = next(d for d in logs.iterdir() if d.is_dir() and not d.name.startswith("."))
    helper_started = (job_dir / "tracking" / "helper.log").exists()
    wait_for(lambda: not job_processes(str(job_dir)), timeout=120, what="ranks (and a helper) gone")
    sync = subprocess.run([cli, "sync", job_dir.name, "--end", "FAILED"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert sync.returncode == 0, sync.stdout + sync.stderr
    assert "delivered 80, pending 0" in sync.stdout, (helper_started, sync.stdout)
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = json.loads((job_dir / "tracking" / "sink.json").read_text())["parent_run_id"]
    runs = child_runs(c, parent)
    assert len(runs) == 2 and c.get_run(parent).info.status == "FAILED"
    for run in runs:
        assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(40))
