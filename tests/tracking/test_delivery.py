"""The delivery guarantees: logged = stored, 0 duplicates, under several launchers on one fresh
store, ranks stopped by SIGTERM, an oversized record, and a drain deadline that leaves points
for `sync`. Real rank processes, the real forwarding helper process, a real sqlite store."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from platform_plugin.launcher import launch
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.job.handle import JobTracking
from platform_plugin.tracking.delivery.replay import sync_spool_dir
from platform_plugin.tracking.sinks.mlflow_end import PENDING_TAG
from platform_plugin.tracking.shared.state import HelperStatus, StreamState
from platform_plugin.tracking.rank.tracker import Tracker
from tests.tracking.helpers import child_runs, client, make_plan

QUIET = {"write": lambda text: None, "no_system_metrics": True}  # the ranks' own records only

RANK = """
import os
from platform_plugin import tracking
t = tracking.get_tracker()
t.log_param("rank", os.environ["RANK_ID"])
for step in range(40):
    t.log_metric("loss", 1.0 / (step + 1))
"""

LAUNCHER = """
import json, sys
from platform_plugin.launcher import launch
r = launch([sys.executable, "rank.py"], nproc=8, backend="plain", job_name=sys.argv[1],
           write=lambda s: None, no_system_metrics=True)
mlflow_in_launcher = "mlflow" in sys.modules  # before waiting: the helper process has it
r.tracking.wait_ended(600)
print(json.dumps({"job": r.job_id, "parent": r.tracking.parent_run_id, "pending": r.tracking.pending,
                  "delivered": r.tracking.delivered, "mlflow_in_launcher": mlflow_in_launcher}))
"""


def metric_rows(db: Path) -> list[tuple]:
    """The ranks' points (the parent run's per-step aggregates are named loss/mean, ...)."""
    with sqlite3.connect(db) as con:
        return con.execute("SELECT run_uuid, key, step, timestamp, value FROM metrics WHERE key = 'loss'").fetchall()


@pytest.mark.slow
def test_three_launchers_of_eight_ranks_on_one_fresh_store(tracking_env, tmp_path):
    (tmp_path / "rank.py").write_text(RANK)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    procs = [subprocess.Popen([sys.executable, "launcher.py", f"job{i}"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    jobs = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")  # the store opens afterwards
    for job in jobs:
        assert (job["delivered"], job["pending"], job["mlflow_in_launcher"]) == (8 * 41, 0, False)
        runs = child_runs(c, job["parent"])
        assert [r.info.run_name for r in runs] == [f"rank-{i:02d}" for i in range(8)]
        for rank, run in enumerate(runs):
            assert run.info.status == "FINISHED" and run.data.params == {"rank": str(rank)}
            assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(40))
    rows = metric_rows(tmp_path / "mlflow.db")
    assert len(rows) == len(set(rows)) == 3 * 8 * 40  # logged = stored, no duplicates
    # one experiment per project folder: the three launchers raced to create it, made it once
    assert len({c.get_run(job["parent"]).info.experiment_id for job in jobs}) == 1
    assert len(c.search_experiments()) == 2  # Default + the project's


TERMED = """
import os, sys, time
from pathlib import Path
from platform_plugin import tracking
t = tracking.get_tracker()
if os.environ["RANK_ID"] == "1":
    while not Path("logged").exists():
        time.sleep(0.02)
    sys.exit(1)  # fails: the launcher stops rank 0 with SIGTERM
t._stop.set()  # the 0.2 s timer off: only the SIGTERM handler can write the points now
for step in range(150):
    t.log_metric("loss", float(step))
Path("logged").touch()
time.sleep(300)
"""


@pytest.mark.slow
def test_a_rank_stopped_by_sigterm_keeps_every_point_it_logged(tracking_env, tmp_path):
    (tmp_path / "termed.py").write_text(TERMED)
    result = launch([sys.executable, "termed.py"], nproc=2, backend="plain", cwd=str(tmp_path),
                    check=False, grace=30, **QUIET)
    assert not result.ok
    report = result.tracking
    assert (report.delivered, report.pending) == (150, 0), report.reason
    assert report.wait_ended()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run0 = child_runs(c, report.parent_run_id)[0]
    assert sorted(m.step for m in c.get_metric_history(run0.info.run_id, "loss")) == list(range(150))
    assert run0.info.status == "FAILED"


def rank_tracker(env: dict, plan, rank: int) -> Tracker:
    return Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env({**plan.ranks[rank].env, **env}))


class Ended:  # what finish() reads of a JobResult
    def __init__(self, ok: bool):
        self.ok = ok


def test_an_oversized_record_is_refused_and_never_blocks_later_ones(tracking_env, tmp_path):
    plan = make_plan(tmp_path, 1)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    spool = Path(env["PLATFORM_TRACKING_SPOOL_DIR"])
    t = rank_tracker(env, plan, 0)
    t.log_param("lr", 0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.set_tag("notes", "x" * (9 << 20))  # 9 MiB: over MLflow's 8,000 characters
        t.log_param("config", "y" * 6001)
        t.log_metric("m" * 251, 1.0)
    assert [str(w.message).split(":")[1].strip() for w in caught] == ["'notes' not logged", "'config' not logged",
                                                                     f"'{'m' * 80}' not logged"]
    t.flush()
    with open(spool / "rank_0.jsonl", "ab") as f:  # a line no valid record comes near (older writer)
        f.write(json.dumps(["t", "blob", "z" * (2 << 20)]).encode() + b"\n")
        f.write(json.dumps(["t", "huge", "z" * (9 << 20)]).encode() + b"\n")
    for step in range(30):
        t.log_metric("loss", 0.5, step=step)
    t.close()
    jt.started()
    report = jt.finish(Ended(ok=True))
    assert (report.delivered, report.pending, report.refused, report.quarantined) == (31, 0, 3, 2), report.reason
    assert "over MLflow's size limits" in report.reason and "quarantine" in report.reason
    assert report.wait_ended()
    run = client(jt.config.tracking_uri).get_run(StreamState.load(spool, "rank_0").run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1"}
    assert "notes" not in run.data.tags and "blob" not in run.data.tags
    assert len((spool / "rank_0.jsonl.quarantine").read_bytes().splitlines()) == 2
    assert sync_spool_dir(spool).delivered_now == 0  # sync has nothing left: it is not stuck


def test_the_drain_deadline_is_kept_and_sync_delivers_the_rest_exactly_once(tracking_env, tmp_path):
    tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "0")
    plan = make_plan(tmp_path, 2)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    for rank in (0, 1):
        t = rank_tracker(env, plan, rank)
        for step in range(3000):
            t.log_metric("loss", 1.0 / (step + 1), step=step)
        t.close()
    jt.started()
    report = jt.finish(Ended(ok=False))  # returns at its deadline, whatever the backlog
    assert report.pending > 0 and f"platform-run sync {plan.job_id}" in report.reason
    assert report.wait_ended() and not HelperStatus.load(jt.spool_dir).runs_ended
    spool = Path(report.spool_dir)
    c = client(jt.config.tracking_uri)
    pending = {label: 3000 - StreamState.load(spool, f"rank_{label}").delivered for label in ("0", "1")}
    for rank, run in enumerate(child_runs(c, report.parent_run_id)):
        # not FINISHED/FAILED while points wait in the spool: RUNNING, tagged with how many
        assert run.info.status == "RUNNING" and run.data.tags[PENDING_TAG] == str(pending[str(rank)])
    assert c.get_run(report.parent_run_id).info.status == "RUNNING"
    res = sync_spool_dir(spool)
    assert (res.counts.pending, res.ended, res.counts.delivered) == (0, True, 6000)
    for run in child_runs(c, report.parent_run_id):
        assert run.info.status == "FAILED" and PENDING_TAG not in run.data.tags  # the job's status
        assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(3000))
    assert len(set(metric_rows(tmp_path / "mlflow.db"))) == len(metric_rows(tmp_path / "mlflow.db")) == 6000


def test_a_helper_without_the_jobs_sink_config_says_why_in_helper_json(tmp_path):
    done = subprocess.run([sys.executable, "-m", "platform_plugin.tracking.delivery.helper", str(tmp_path)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    status = HelperStatus.load(tmp_path)
    assert done.returncode != 0 and status is not None
    assert status.phase == "done" and "no sink.json" in status.error
