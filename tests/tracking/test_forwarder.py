"""JobTracking + forwarder against a real sqlite MLflow store (no server, no rank processes:
the ranks' trackers write the spools from this process, exactly as they would from theirs; the
forwarding helper is the real helper process, or a Forwarder driven by the test)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from platform_plugin.tracking.delivery.forwarder import Forwarder
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.job.handle import JobTracking
from platform_plugin.tracking.delivery.replay import sync_spool_dir
from platform_plugin.tracking.sinks import get_sink
from platform_plugin.tracking.shared.state import HelperStatus, SinkConfig, StreamState
from platform_plugin.tracking.rank.tracker import Tracker
from tests.tracking.helpers import child_runs, client, make_plan, refused_url


class Result:  # the two JobResult attributes finish() reads
    def __init__(self, ok):
        self.ok = ok
        self.status = "succeeded" if ok else "failed"


def test_forwarder(jt) -> Forwarder:
    """A forwarder of the job's spool driven by the test (what the helper process runs)."""
    return Forwarder(jt.spool_dir, jt.config, get_sink(jt.sink))


test_forwarder.__test__ = False  # a helper, not a test


def rank_tracker(env: dict, plan, rank: int) -> Tracker:
    rank_env = {**plan.ranks[rank].env, **env}
    return Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env(rank_env))


def test_ranks_need_no_sink_and_every_point_arrives(tracking_env, tmp_path):
    plan = make_plan(tmp_path, 2, env={"RANK_TABLE_FILE": "/x/hccl_2p.json", "PLATFORM_RUN_MODE": "full"})
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()  # no store, no runs: the ranks start at once
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # default: the project folder (ranks' cwd)
    assert not (tmp_path / "mlflow.db").exists() and jt.config.tracking_uri == uri
    jt.started()  # the supervisor's word: ranks run, the forwarding helper starts
    for rank in (0, 1):
        t = rank_tracker(env, plan, rank)
        t.log_param("lr", 0.01 * (rank + 1))
        for step in range(1200):  # > one log_batch (1000 metrics)
            t.log_metric("loss", 1.0 / (step + 1) + rank)
        t.close()
    report = jt.finish(Result(ok=True))
    assert (report.delivered, report.pending, report.reason) == (2 * 1201, 0, "")
    assert report.wait_ended() and HelperStatus.load(jt.spool_dir).runs_ended
    c = client(uri)
    parent_id = report.parent_run_id
    assert [r.info.run_name for r in child_runs(c, parent_id)] == ["rank-00", "rank-01"]
    parent = c.get_run(parent_id)
    assert parent.info.run_name == plan.job_id and parent.info.status == "FINISHED"
    tags = parent.data.tags
    assert tags["job_id"] == plan.job_id and tags["mode"] == "full" and tags["backend"] == "plain"
    assert tags["command"] == "python train.py" and tags["env.RANK_TABLE_FILE"] == "/x/hccl_2p.json"
    assert c.get_experiment(parent.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    for rank, run in enumerate(child_runs(c, parent_id)):
        assert run.info.status == "FINISHED"
        assert {k: run.data.tags[k] for k in ("rank_id", "device_id", "server_id")} == \
            {"rank_id": str(rank), "device_id": str(4 + rank), "server_id": "10.0.0.1"}
        history = c.get_metric_history(run.info.run_id, "loss")
        assert sorted(m.step for m in history) == list(range(1200))
        assert run.data.params == {"lr": str(0.01 * (rank + 1))}
        assert [a.path for a in c.list_artifacts(run.info.run_id, "logs")] == [f"logs/rank_{rank}.log"]


def test_a_crash_between_send_and_offset_write_replays_without_duplicates(tracking_env, tmp_path, monkeypatch):
    plan = make_plan(tmp_path, 1)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    t = rank_tracker(env, plan, 0)
    t.log_param("epochs", 3)
    for step in range(50):
        t.log_metric("loss", 0.5, step=step)  # equal values: only step/timestamp tell them apart
    t.close()
    spool = Path(env["PLATFORM_TRACKING_SPOOL_DIR"])

    real_save = StreamState.save

    def crash_after_send(self, *args):  # the sink accepted the batch; the offset never lands
        raise KeyboardInterrupt("killed between send and offset write")

    monkeypatch.setattr(StreamState, "save", crash_after_send)
    with pytest.raises(KeyboardInterrupt):
        test_forwarder(jt).pump()
    monkeypatch.setattr(StreamState, "save", real_save)
    assert StreamState.load(spool, "rank_0").offset == 0  # the replay will resend everything

    result = sync_spool_dir(spool, end_status="FINISHED")
    assert (result.counts.delivered, result.counts.pending, result.ended) == (51, 0, True)
    c = client(jt.config.tracking_uri)
    run_id = StreamState.load(spool, "rank_0").run_id
    assert sorted(m.step for m in c.get_metric_history(run_id, "loss")) == list(range(50))
    assert sync_spool_dir(spool).delivered_now == 0  # a second sync sends nothing


def test_partial_line_waits_and_a_refused_record_does_not_block_the_rest(tracking_env, tmp_path):
    plan = make_plan(tmp_path, 1)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    spool = Path(env["PLATFORM_TRACKING_SPOOL_DIR"])
    t = rank_tracker(env, plan, 0)
    t.log_param("lr", 0.1)
    t.log_param("lr", 0.2)  # MLflow refuses to change a param: rejected, counted, not retried forever
    t.log_metric("loss", 1.0)
    t.close()
    with open(spool / "rank_0.jsonl", "ab") as f:
        f.write(b'["m","loss",0.9,1,17')  # a writer still mid-line
    forwarder = test_forwarder(jt)
    assert forwarder.pump()
    counts = forwarder.counts()
    assert (counts.delivered, counts.rejected, counts.pending, counts.partial_lines) == (2, 1, 0, 1)
    assert "Changing param values is not allowed" in StreamState.load(spool, "rank_0").last_error
    with open(spool / "rank_0.jsonl", "ab") as f:
        f.write(b'00000000]\n')  # the line completes: now it goes
    report = jt.finish(Result(ok=False))
    assert (report.delivered, report.pending, report.rejected) == (3, 0, 1)
    assert "refused by mlflow" in report.reason
    assert report.wait_ended()
    c = client(jt.config.tracking_uri)
    run = c.get_run(StreamState.load(spool, "rank_0").run_id)
    assert run.info.status == "FAILED" and run.data.params == {"lr": "0.1"}
    assert sorted((m.step, m.value) for m in c.get_metric_history(run.info.run_id, "loss")) == [(0, 1.0), (1, 0.9)]


def test_a_round_refused_because_of_one_stream_still_delivers_the_others(tracking_env, tmp_path):
    """Into sqlite a round of all streams' batches is one transaction; when it fails (here: one
    rank's run was deleted, so the store refuses its points for good), every stream's batch goes
    on its own: the others are delivered, the dead run's points are counted as rejected."""
    plan = make_plan(tmp_path, 3)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    spool = Path(env["PLATFORM_TRACKING_SPOOL_DIR"])
    for rank in range(3):
        t = rank_tracker(env, plan, rank)
        t.log_metric("loss", 1.0 + rank, step=0)
        t.close()
    forwarder = test_forwarder(jt)
    forwarder.sink.ensure_runs(jt.config, spool, ["0", "1", "2"])
    assert forwarder.sink.joins_rounds(jt.config)  # a local sqlite store: rounds in one call
    c = client(jt.config.tracking_uri)
    c.delete_run(StreamState.load(spool, "rank_1").run_id)
    for rank in range(3):
        t = rank_tracker(env, plan, rank)
        t.log_metric("loss", 10.0 + rank, step=1)
        t.close()
    assert forwarder.pump()
    states = [StreamState.load(spool, f"rank_{rank}") for rank in range(3)]
    assert [(s.delivered, s.rejected) for s in states] == [(2, 0), (0, 2), (2, 0)]
    for rank in (0, 2):
        history = c.get_metric_history(states[rank].run_id, "loss")
        assert sorted((m.step, m.value) for m in history) == [(0, 1.0 + rank), (1, 10.0 + rank)]


def test_flat_layout_puts_every_rank_in_the_job_run_with_suffixed_keys(tracking_env, tmp_path):
    tracking_env.setenv("PLATFORM_TRACKING_LAYOUT", "flat")
    plan = make_plan(tmp_path, 2)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    assert env["PLATFORM_TRACKING_LAYOUT"] == "flat"
    for rank in (0, 1):
        t = rank_tracker(env, plan, rank)
        t.log_param("lr", 0.1)
        t.log_metrics({"loss": 1.0, "acc": 0.5})
        t.close()
    report = jt.finish(Result(ok=True))
    assert report.wait_ended()
    c = client(jt.config.tracking_uri)
    run = c.get_run(report.parent_run_id)
    assert set(run.data.metrics) == {"loss-0", "acc-0", "loss-1", "acc-1"}
    assert run.data.params == {"lr-0": "0.1", "lr-1": "0.1"}
    assert child_runs(c, report.parent_run_id) == []
    assert sorted(a.path for a in c.list_artifacts(run.info.run_id, "logs")) == ["logs/rank_0", "logs/rank_1"]


def test_wflogger_names_carry_the_rank(wflogger_standin, tmp_path):
    # The platform SDK is private: tests/assets/tracking/wf_analyse is a STAND-IN that records calls.
    calls = wflogger_standin
    plan = make_plan(tmp_path, 2)
    jt = JobTracking.create("auto", plan)  # SDK importable and no MLflow URI: wflogger
    assert jt.sink == "wflogger"
    env = jt.prepare()
    jt.started()
    for rank in (0, 1):
        t = rank_tracker(env, plan, rank)
        t.log_param("learning", 0.01)
        t.log_metric("loss", 0.5 + rank, step=3)
        t.close()
    report = jt.finish(Result(ok=True))
    assert (report.delivered, report.pending) == (4, 0)
    got = sorted((c["call"], c["name"], c["value"], c.get("step"))
                 for c in map(json.loads, calls.read_text().splitlines()))
    assert got == [("log_metric", "loss-0", 0.5, 3), ("log_metric", "loss-1", 1.5, 3),
                   ("log_param", "learning-0", "0.01", None), ("log_param", "learning-1", "0.01", None)]


def test_dead_server_at_start_defers_everything_to_sync(tracking_env, tmp_path):
    with refused_url() as url:  # nobody listens
        tracking_env.setenv("MLFLOW_TRACKING_URI", url)
        plan = make_plan(tmp_path, 1)
        jt = JobTracking.create("mlflow", plan)
        env = jt.prepare()  # returns at once: the ranks can start
        jt.started()
        t = rank_tracker(env, plan, 0)
        t.log_metric("loss", 1.0)
        t.close()
        tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "1")
        waits: list[int] = []  # the launcher records the ranks' end in job.json before it waits
        report = jt.finish(Result(ok=True), waiting=lambda: waits.append(1))
        assert report.delivered == 0 and report.pending == 1 and waits == [1]
        assert f"platform-run sync {plan.job_id}" in report.reason
        assert report.wait_ended()  # the helper gave up at the deadline and said why
        assert "unreachable" in HelperStatus.load(jt.spool_dir).error
        assert test_forwarder(jt).counts().pending == 1
        # sync retries a sink that is down for --wait seconds, then reports it; nothing moved
        res = sync_spool_dir(Path(report.spool_dir), wait=3.0)
    assert res.attempts >= 2 and "unreachable" in res.error and not res.ended
    assert (res.delivered_now, res.counts.delivered, res.counts.pending) == (0, 0, 1)


STANDALONE = """
from platform_plugin import tracking
t = tracking.get_tracker()
t.log_param("lr", 0.1)
for step in range(300):
    t.log_metric("loss", 1.0 / (step + 1))
"""


@pytest.mark.slow
def test_a_script_without_launcher_forwards_in_process_and_drains_at_exit(tracking_env, tmp_path):
    import subprocess
    import sys
    (tmp_path / "solo.py").write_text(STANDALONE)
    subprocess.run([sys.executable, "solo.py"], cwd=tmp_path, check=True, timeout=300)
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = c.search_runs([c.get_experiment_by_name(tmp_path.name).experiment_id])  # the folder
    assert run.info.run_name == "solo" and run.info.status == "FINISHED"
    assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(300))

    # the same script with its server down: it still exits, and says how to deliver later
    with refused_url() as url:
        env = dict(os.environ, MLFLOW_TRACKING_URI=url, PLATFORM_TRACKING_DRAIN_TIMEOUT="1")
        done = subprocess.run([sys.executable, "solo.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
    assert done.returncode == 0
    assert "301 records wait in" in done.stderr and "platform-run sync" in done.stderr


def test_a_failed_pass_neither_loses_nor_double_counts(tracking_env, tmp_path):
    """A sink failing once mid-way (injected ConnectionError, as a dropped connection raises):
    the retry resumes at the offset, and the unreadable line it re-reads is counted once."""
    plan = make_plan(tmp_path, 1)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    spool = Path(env["PLATFORM_TRACKING_SPOOL_DIR"])
    t = rank_tracker(env, plan, 0)
    for step in range(150):
        t.log_param(f"p{step}", step)  # 100 params per batch: two batches
    t.close()
    with open(spool / "rank_0.jsonl", "r+b") as f:  # garble one line of the second batch
        lines = f.read().splitlines(keepends=True)
        lines[120] = b"#garbled\n"
        f.seek(0)
        f.write(b"".join(lines))
        f.truncate()
    forwarder = test_forwarder(jt)
    real_deliver, calls = forwarder.sink.deliver, []

    def deliver_failing_second_batch(*args):
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("connection dropped")
        return real_deliver(*args)

    forwarder.sink.deliver = deliver_failing_second_batch
    assert not forwarder.pump()
    assert (forwarder.counts().delivered, forwarder.counts().skipped) == (100, 0)
    assert forwarder.pump()
    counts = forwarder.counts()
    assert (counts.delivered, counts.skipped, counts.pending) == (149, 1, 0)
    run = client(jt.config.tracking_uri).get_run(StreamState.load(spool, "rank_0").run_id)
    assert len(run.data.params) == 149 and "p120" not in run.data.params


def counting(forwarder: Forwarder, fail_at: int = 0) -> list[int]:
    """Records the size of every batch the sink is handed; `fail_at`: that call raises a
    ConnectionError instead (injected, as a dropped connection raises)."""
    real_deliver, calls = forwarder.sink.deliver, []

    def deliver(*args):
        calls.append(len(args[3]))
        if len(calls) == fail_at:
            raise ConnectionError("connection dropped")
        return real_deliver(*args)

    forwarder.sink.deliver = deliver
    return calls


def test_a_half_delivered_before_a_dropped_connection_counts_once(tracking_env, tmp_path):
    """A batch refused for one bad record goes in halves; the connection drops after the
    first half went: the resent batch's first half is not counted (nor aggregated) twice."""
    plan = make_plan(tmp_path, 1)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    t = rank_tracker(env, plan, 0)
    t.log_param("lr", 0.1)
    t.close()
    forwarder = test_forwarder(jt)
    assert forwarder.pump()
    t = rank_tracker(env, plan, 0)
    for i in range(7):
        t.log_param(f"p{i}", i)
    t.log_param("lr", 0.2)  # refused for good (MLflow never changes a param)
    t.close()
    calls = counting(forwarder, fail_at=3)
    assert not forwarder.pump()
    assert calls == [8, 4, 4]  # whole, first half (stored), second half (dropped)
    assert forwarder.pump()
    counts = forwarder.counts()
    assert (counts.delivered, counts.rejected, counts.pending) == (8, 1, 0)


def test_a_deleted_runs_batch_is_set_aside_in_one_request(tracking_env, tmp_path):
    """A deleted run refuses every point alike: its batch is set aside whole, with the store's
    reason, at the cost of the one request that was refused (halving it to find the bad record
    cost n + log2 n requests: 1,000s for a rank's backlog into a server)."""
    plan = make_plan(tmp_path, 1)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    spool = Path(env["PLATFORM_TRACKING_SPOOL_DIR"])
    forwarder = test_forwarder(jt)
    forwarder.sink.ensure_runs(jt.config, spool, ["0"])
    client(jt.config.tracking_uri).delete_run(StreamState.load(spool, "rank_0").run_id)
    t = rank_tracker(env, plan, 0)
    for step in range(64):
        t.log_metric("loss", 1.0, step=step)
    t.close()
    calls = counting(forwarder)
    assert forwarder.pump()
    state = StreamState.load(spool, "rank_0")
    assert (state.delivered, state.rejected) == (0, 64)
    assert len(calls) == 1
    kept = [json.loads(line) for line in (spool / "rank_0.jsonl.rejected").read_text().splitlines()]
    assert [r["record"][3] for r in kept] == list(range(64))
    assert all("must be in the 'active' state" in r["reason"] for r in kept)


def test_sync_refuses_a_negative_wait(tracking_env, capsys):
    from platform_plugin.cli import main
    assert main(["sync", "--wait", "-1"]) == 2
    assert "--wait -1" in capsys.readouterr().err


def test_sync_waits_a_bounded_time_for_a_stream_another_forwarder_holds(tracking_env, tmp_path):
    """A launcher whose server died mid-request sits in MLflow's HTTP retries for minutes with
    its stream locked: sync waits for it at most --wait seconds, says so, and sends nothing
    twice; once the stream is free, sync delivers it."""
    from platform_plugin.tracking.shared.state import stream_lock
    plan = make_plan(tmp_path, 1)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    spool = Path(env["PLATFORM_TRACKING_SPOOL_DIR"])
    t = rank_tracker(env, plan, 0)
    for step in range(5):
        t.log_metric("loss", 1.0, step=step)
    t.close()
    with stream_lock(spool, "rank_0", blocking=True) as held:  # the other forwarder (a flock per open file)
        assert held
        res = sync_spool_dir(spool, end_status="FINISHED", wait=1.0)
    assert "rank_0 is being forwarded by another process" in res.error and not res.ended
    assert (res.delivered_now, res.counts.pending) == (0, 5)
    res = sync_spool_dir(spool, end_status="FINISHED", wait=1.0)
    assert (res.delivered_now, res.counts.pending, res.error, res.ended) == (5, 0, "", True)
    run_id = StreamState.load(spool, "rank_0").run_id
    assert sorted(m.step for m in client(jt.config.tracking_uri).get_metric_history(run_id, "loss")) == list(range(5))
