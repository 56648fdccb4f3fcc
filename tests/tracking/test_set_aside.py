"""A record the store can never take costs only itself: a real launch whose rank spools one
point at step 2**63 among its 3,000 (a line the rank's own check would refuse, written
straight into its spool as an older tracker would), a run deleted mid-job, into the default
sqlite store and into the team server (real PostgreSQL behind `platform-run server`'s app).
The rest is stored, the bad record is set aside with the reason and counted in the report and
job.json, and `platform-run sync` ends 0 saying what was set aside. Also: the rank refuses a
step outside int64 as it refuses a name over 250 characters, and two `sync` of one job at once
send each batch once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from platform_plugin.launcher import launch
from platform_plugin.tracking.delivery.forwarder import Forwarder
from platform_plugin.tracking.shared.state import StreamState
from platform_plugin.tracking.job.handle import JobTracking
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.rank.tracker import Tracker
from platform_plugin.tracking.sinks import get_sink
from platform_plugin.util.jobdirs import JOB_FILE
from tests import hostile
from tests.tracking.helpers import child_runs, client, make_plan

CLI = str(Path(sys.executable).with_name("platform-run"))
POINTS = 3000
BAD_STEP = 2 ** 63
RANK = f"""
import json, os, time
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range({POINTS}):
    t.log_metric("loss", 1.0 + step, step=step)
    if step == 1500 and os.environ["RANK_ID"] == "0":
        t.flush()  # then a line no check of this tracker lets through, at its place in the spool
        with open(os.path.join(os.environ["PLATFORM_TRACKING_SPOOL_DIR"], "rank_0.jsonl"), "a") as f:
            f.write(json.dumps(["m", "loss", 7.0, {BAD_STEP}, int(time.time() * 1000)]) + "\\n")
"""


def _sync(job_id: str, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "sync", job_id, *more], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "team server"])
def test_a_step_beyond_int64_costs_only_itself(tracking_env, tmp_path, store, request):
    if store == "team server":
        tracking_env.setenv("MLFLOW_TRACKING_URI", request.getfixturevalue("postgres_mlflow"))
    (tmp_path / "rank.py").write_text(RANK)
    result = launch([sys.executable, "rank.py"], nproc=2, cwd=str(tmp_path), no_system_metrics=True,
                    write=lambda text: None)
    assert result.ok
    assert result.tracking.wait_ended(300)
    report = result.tracking
    assert (report.delivered, report.pending, report.rejected) == (2 * POINTS, 0, 1), report.reason
    assert "set aside" in report.reason
    saved = json.loads((Path(result.job_dir) / JOB_FILE).read_text())["result"]["tracking"]
    assert (saved["delivered"], saved["rejected"]) == (2 * POINTS, 1)
    spool = Path(report.spool_dir)
    (kept,) = [json.loads(line) for line in (spool / "rank_0.jsonl.rejected").read_text().splitlines()]
    assert kept["record"][:4] == ["m", "loss", 7.0, BAD_STEP] and kept["reason"]
    c = client(os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{tmp_path / 'mlflow.db'}")
    for run in child_runs(c, report.parent_run_id):
        history = c.get_metric_history(run.info.run_id, "loss")
        assert sorted(m.step for m in history) == list(range(POINTS)), run.info.run_name
        assert run.info.status == "FINISHED"
    sync = _sync(result.job_id)
    assert sync.returncode == 0, sync.stdout + sync.stderr
    assert "sent 0 now" in sync.stdout and "set aside: 1 record(s) refused for good" in sync.stdout


def _spool_job(tmp_path: Path, ranks: int, points: int):
    """A job whose ranks spooled `points` each and whose helper never ran (the launcher gone
    before it started): the JobTracking, and a function giving a rank's tracker."""
    plan = make_plan(tmp_path, ranks)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()

    def tracker(rank: int) -> Tracker:
        return Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env({**plan.ranks[rank].env, **env}))
    for rank in range(ranks):
        t = tracker(rank)
        for step in range(points):
            t.log_metric("loss", float(rank * points + step), step=step)
        t.close()
    return jt, tracker


@pytest.mark.parametrize("store", ["sqlite", pytest.param("team server", marks=pytest.mark.slow)])
def test_a_run_deleted_mid_job_sets_its_points_aside_and_sync_ends_0(tracking_env, tmp_path, store,
                                                                     request):
    if store == "team server":
        tracking_env.setenv("MLFLOW_TRACKING_URI", request.getfixturevalue("postgres_mlflow"))
    jt, tracker = _spool_job(tmp_path, 2, 100)
    spool = Path(jt.spool_dir)
    forwarder = Forwarder(jt.spool_dir, jt.config, get_sink(jt.sink))
    assert forwarder.pump()
    c = client(jt.config.tracking_uri)
    deleted = StreamState.load(spool, "rank_1").run_id
    c.delete_run(deleted)  # by someone in the UI, while the job runs
    for rank in range(2):
        t = tracker(rank)
        for step in range(100, POINTS):
            t.log_metric("loss", float(step), step=step)
        t.close()
    sync = _sync(str(spool.parent))
    assert sync.returncode == 0, sync.stdout + sync.stderr
    assert f"delivered {POINTS + 100}, pending 0" in sync.stdout, sync.stdout
    assert f"set aside: {POINTS - 100} record(s)" in sync.stdout, sync.stdout
    kept = (spool / "rank_1.jsonl.rejected").read_text().splitlines()
    assert len(kept) == POINTS - 100 and "must be in the 'active' state" in json.loads(kept[0])["reason"]
    assert len(c.get_metric_history(StreamState.load(spool, "rank_0").run_id, "loss")) == POINTS


def test_the_rank_refuses_a_step_outside_int64_as_it_refuses_a_long_name(tracking_env, tmp_path):
    jt, tracker = _spool_job(tmp_path, 1, 0)
    spool = Path(jt.spool_dir)
    t = tracker(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.log_metric("loss", 1.0, step=BAD_STEP)
        t.log_metric("loss", 1.0, step=-BAD_STEP - 1)
        t.log_metric("loss", "not a number", step=3)
        t.log_metric("loss", float("nan"), step=BAD_STEP - 1)  # NaN and the last int64 step: MLflow's
        t.log_metric("loss", 2.0)  # the counter's next step would be 2**63: refused, not wrapped
    t.close()
    lines = [json.loads(line) for line in (spool / "rank_0.jsonl").read_text().splitlines()]
    assert [line[0] for line in lines] == ["r", "r", "r", "m", "r"]
    assert lines[3][3] == BAD_STEP - 1 and "64-bit" in lines[0][3]
    assert len(caught) == 1 and "'loss' not logged" in str(caught[0].message)  # once per name


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "team server"])
def test_two_syncs_at_once_send_each_batch_once(tracking_env, tmp_path, store, request):
    if store == "team server":
        tracking_env.setenv("MLFLOW_TRACKING_URI", request.getfixturevalue("postgres_mlflow"))
    jt, _ = _spool_job(tmp_path, 4, 20_000)
    spool = Path(jt.spool_dir)
    syncs = [subprocess.Popen([CLI, "sync", str(spool.parent), "--wait", "300"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in syncs]
    assert [p.returncode for p in syncs] == [0, 0], outs
    sent = [int(out.split("sent ", 1)[1].split(" ", 1)[0]) for out in outs]
    assert sum(sent) == 4 * 20_000, outs
    c = client(jt.config.tracking_uri)
    parent = json.loads((spool / "sink.json").read_text())["parent_run_id"]
    for run in child_runs(c, parent):
        history = c.get_metric_history(run.info.run_id, "loss")
        assert len(history) == 20_000 and len({m.step for m in history}) == 20_000
    # the parent's aggregates of the steps the syncs delivered: each step once, over every rank
    means = sorted((m.step, m.value) for m in c.get_metric_history(parent, "loss/mean"))
    assert means == [(step, 1.5 * 20_000 + step) for step in range(20_000)]


def test_what_is_permanent_and_what_may_pass(tmp_path):
    """Real errors of the stores and the network: a number sqlite cannot hold and MLflow's
    refusals are permanent; a locked database, a refused connection and a 5xx may pass."""
    import socket
    import sqlite3

    from platform_plugin.tracking.sinks.mlflow_refusals import permanent
    from platform_plugin.tracking.sinks.mlflow_rest import error_of
    from tests.tracking.helpers import hold_port

    db = tmp_path / "x.db"
    holder, other = sqlite3.connect(db), sqlite3.connect(db, timeout=0)
    holder.execute("CREATE TABLE t (n INTEGER)")
    holder.commit()
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.OperationalError, match="locked") as locked:
        other.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(OverflowError) as overflow:
        holder.execute("INSERT INTO t VALUES (?)", (BAD_STEP,))
    holder.close()
    other.close()
    closed = hold_port()  # bound, not listening: a connection to it is refused
    with pytest.raises(ConnectionRefusedError) as refused:
        socket.create_connection(closed.getsockname()[:2], timeout=5)
    closed.close()
    refusal = b'{"error_code": "INVALID_PARAMETER_VALUE", "message": "step"}'
    assert permanent(overflow.value)
    assert permanent(error_of("POST", "/x", 400, refusal))
    assert permanent(error_of("POST", "/x", 404, b'{"error_code": "RESOURCE_DOES_NOT_EXIST"}'))
    assert not permanent(locked.value)
    assert not permanent(refused.value)
    assert not permanent(error_of("POST", "/x", 500, b"Internal Server Error"))
    assert not permanent(error_of("POST", "/x", 503, b"{}"))


@pytest.mark.slow
def test_into_postgresql_opened_directly_an_out_of_range_step_is_set_aside(tracking_env, tmp_path,
                                                                          postgres_mlflow):
    """The forwarder's own SQL path into PostgreSQL: psycopg2's NumericValueOutOfRange (a
    DataError) is permanent."""
    tracking_env.setenv("MLFLOW_TRACKING_URI", postgres_mlflow.pg_uri)
    jt, tracker = _spool_job(tmp_path, 1, 100)
    spool = Path(jt.spool_dir)
    with open(spool / "rank_0.jsonl", "a") as f:
        f.write(json.dumps(["m", "loss", 7.0, BAD_STEP, 1]) + "\n")
    t = tracker(0)
    for step in range(100, 200):
        t.log_metric("loss", float(step), step=step)
    t.close()
    forwarder = Forwarder(jt.spool_dir, jt.config, get_sink(jt.sink))
    assert forwarder.pump()
    state = StreamState.load(spool, "rank_0")
    assert (state.delivered, state.rejected) == (200, 1), state.last_error
    (kept,) = [json.loads(line) for line in (spool / "rank_0.jsonl.rejected").read_text().splitlines()]
    assert "NumericValueOutOfRange" in kept["reason"] or "out of range" in kept["reason"]
    assert len(client(postgres_mlflow.pg_uri).get_metric_history(state.run_id, "loss")) == 200


@pytest.mark.parametrize("name", ["acc(top1)", "a/../b", "/abs", "..", "", "x\ny", "n" * 251])
def test_the_rank_refuses_a_name_mlflow_refuses(tracking_env, tmp_path, name):
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_metric

    with pytest.raises(MlflowException):  # MLflow's own verdict on the name
        _validate_metric(name, 1.0, 1, 0)
    jt, tracker = _spool_job(tmp_path, 1, 0)
    t = tracker(0)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        t.log_metric(name, 1.0)
        t.log_param(name, 1)
        t.set_tag(name, "x")
        t.log_metric("loss/mean-0 top:1", 1.0)  # what MLflow takes passes
    t.close()
    lines = [json.loads(line) for line in (Path(jt.spool_dir) / "rank_0.jsonl").read_text().splitlines()]
    assert [line[:2] for line in lines] == [["r", "m"], ["r", "p"], ["r", "t"], ["m", "loss/mean-0 top:1"]]


def _hostile_spool(tmp_path: Path, good: int):
    """One rank's spool: `good` points, every line of tests/hostile.py's SPOOL_LINES, `good`
    more points (steps after the first ones)."""
    jt, tracker = _spool_job(tmp_path, 1, good)
    spool = Path(jt.spool_dir)
    with open(spool / "rank_0.jsonl", "ab") as f:
        f.write(b"".join(line for line, _ in hostile.SPOOL_LINES.values()))
    t = tracker(0)
    for step in range(good, 2 * good):
        t.log_metric("loss", float(step), step=step)
    t.close()
    return jt, spool


def _check_set_aside(spool: Path, state: StreamState) -> None:
    counted = [how for _, how in hostile.SPOOL_LINES.values()]
    assert (state.rejected, state.skipped) == (counted.count("rejected"), counted.count("skipped"))
    kept = [json.loads(line) for line in (spool / "rank_0.jsonl.rejected").read_text().splitlines()]
    assert len(kept) == len(hostile.SPOOL_LINES) and all(entry["reason"] for entry in kept)
    reasons = " ".join(entry["reason"] for entry in kept)
    assert "is not a number: 'abc'" in reasons and "200000 deep" in reasons and "not UTF-8" in reasons


@pytest.mark.parametrize("route", ["forwarder", "sync"])
def test_any_line_no_sink_can_take_costs_only_itself(tracking_env, tmp_path, route):
    """Raw spool lines (a hand-edited or corrupted spool, an older tracker): a value "abc",
    200,000 `[`, bytes that are not UTF-8, a lone surrogate... Each is set aside with its reason
    and counted, every good point before and after it is delivered once, `sync` ends 0 with no
    traceback, and the run is not left RUNNING."""
    jt, spool = _hostile_spool(tmp_path, 100)
    if route == "forwarder":
        forwarder = Forwarder(jt.spool_dir, jt.config, get_sink(jt.sink))
        assert forwarder.pump(), forwarder.last_error
    else:
        sync = _sync(str(spool.parent), "--end", "FINISHED")
        assert sync.returncode == 0, sync.stdout + sync.stderr
        assert "Traceback" not in sync.stdout + sync.stderr
        assert "delivered 200, pending 0" in sync.stdout, sync.stdout
    state = StreamState.load(spool, "rank_0")
    assert state.delivered == 200
    _check_set_aside(spool, state)
    c = client(jt.config.tracking_uri)
    history = c.get_metric_history(state.run_id, "loss")
    assert sorted(m.step for m in history) == list(range(200))
    if route == "sync":
        assert c.get_run(state.run_id).info.status == "FINISHED"


@pytest.mark.slow
def test_a_launched_job_with_hostile_lines_delivers_every_good_point(tracking_env, tmp_path):
    """The same lines written by a rank into its own spool mid-job: the launcher's drain and
    the forwarding helper set them aside, the report and job.json count them, and the runs end."""
    lines = b"".join(line for line, _ in hostile.SPOOL_LINES.values())
    (tmp_path / "lines.bin").write_bytes(lines)
    (tmp_path / "rank.py").write_text(RANK.replace(
        "f.write(json.dumps([\"m\", \"loss\", 7.0, 9223372036854775808, int(time.time() * 1000)]) + \"\\n\")",
        "f.write(open('lines.bin', encoding='latin-1').read())").replace('"a")', '"a", encoding="latin-1")'))
    assert "lines.bin" in (tmp_path / "rank.py").read_text()
    result = launch([sys.executable, "rank.py"], nproc=2, cwd=str(tmp_path), no_system_metrics=True,
                    write=lambda text: None)
    assert result.ok
    assert result.tracking.wait_ended(300)
    report = result.tracking
    counted = [how for _, how in hostile.SPOOL_LINES.values()]
    assert (report.delivered, report.pending) == (2 * POINTS, 0), report.reason
    assert (report.rejected, report.skipped) == (counted.count("rejected"), counted.count("skipped"))
    saved = json.loads((Path(result.job_dir) / JOB_FILE).read_text())["result"]["tracking"]
    assert (saved["delivered"], saved["rejected"], saved["skipped"]) == (
        2 * POINTS, report.rejected, report.skipped)
    _check_set_aside(Path(report.spool_dir), StreamState.load(Path(report.spool_dir), "rank_0"))
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for run in child_runs(c, report.parent_run_id):
        assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(POINTS))
        assert run.info.status == "FINISHED"
