"""Per-step aggregates across ranks in the job's parent run: computed by the forwarder as points
arrive, checked against numpy over the children's points read back from a real sqlite store."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from platform_plugin.tracking.shared.aggregates import StepAggregator, is_throughput
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.job.handle import JobTracking
from platform_plugin.tracking.rank.tracker import Tracker
from tests.tracking.helpers import child_runs, client, make_plan


class Ok:
    ok, status = True, "succeeded"


def test_a_step_is_emitted_once_every_rank_has_it_or_moved_past_it():
    agg = StepAggregator(["0", "1"])
    assert agg.add("0", "loss", 1.0, 0, 10) == []  # rank 1 has not reached step 0
    assert agg.add("0", "loss", 3.0, 1, 20) == []
    done = agg.add("1", "loss", 2.0, 0, 15)
    assert [(p.key, p.value, p.step, p.timestamp_ms) for p in done] == [
        ("loss/mean", 1.5, 0, 15), ("loss/min", 1.0, 0, 15), ("loss/max", 2.0, 0, 15)]
    done = agg.add("1", "loss", 5.0, 2, 30)  # rank 1 skipped step 1: it is done with 1 ranks' value
    assert {p.key: p.value for p in done if p.step == 1} == {"loss/mean": 3.0, "loss/min": 3.0,
                                                             "loss/max": 3.0}
    assert agg.open_steps() == 1  # step 2 waits for rank 0
    assert {p.key: p.value for p in agg.flush()} == {"loss/mean": 5.0, "loss/min": 5.0, "loss/max": 5.0}
    assert agg.open_steps() == 0


def test_a_step_counter_reset_every_epoch_aggregates_each_pass_across_ranks():
    """`log_metric("loss", v, step=batch_index)` restarts at 0 every epoch: the second epoch's
    step 0 of each rank is aggregated with the other ranks' second-epoch step 0 (before: each
    rank's point re-opened an emitted step and went out alone, a "mean" of one rank, as many
    times as ranks)."""
    agg = StepAggregator(["0", "1"])
    out = []
    for epoch in range(3):
        for rank in (0, 1):
            out += agg.add_batch(str(rank), [["m", "loss", 10 * epoch + rank, s, 1000 + s]
                                             for s in range(3)])
    out += agg.flush()
    means = [(p.step, p.value) for p in out if p.key == "loss/mean"]
    assert means == [(s, 10 * e + 0.5) for e in range(3) for s in range(3)]
    assert agg.late == 0 and agg.open_steps() == 0


def test_a_point_of_a_step_already_emitted_is_left_out_and_counted(monkeypatch):
    """A rank more than MAX_OPEN_STEPS behind: the oldest steps went out with what they had; its
    late points must not re-open them (a second, one-rank "mean" for the same step)."""
    from platform_plugin.tracking.shared import aggregates
    monkeypatch.setattr(aggregates, "MAX_OPEN_STEPS", 2)
    agg = StepAggregator(["0", "1"])
    out = agg.add_batch("0", [["m", "loss", 1.0, s, 1] for s in range(5)])
    assert sorted({p.step for p in out}) == [0, 1, 2]  # over the cap: emitted with rank 0 only
    out = agg.add_batch("1", [["m", "loss", 3.0, s, 1] for s in range(5)])
    assert [(p.step, p.value) for p in out if p.key == "loss/mean"] == [(3, 2.0), (4, 2.0)]
    assert agg.late == 3
    jobs = aggregates.JobAggregates(["0", "1"], sink=None, config=None)
    jobs.aggregator = agg
    assert "3 points came after their step was aggregated" in jobs.problems()


def test_throughput_names_get_a_sum():
    assert all(map(is_throughput, ["samples_per_s", "epoch_samples_per_s", "tokens_per_s",
                                   "throughput", "io/Throughput_MBps"]))
    assert not any(map(is_throughput, ["loss", "per_sample_loss", "step_time_s"]))
    agg = StepAggregator(["0", "1"])
    agg.add("0", "samples_per_s", 100.0, 0, 1)
    keys = {p.key: p.value for p in agg.add("1", "samples_per_s", 50.0, 0, 2)}
    assert keys["samples_per_s/sum"] == 150.0 and keys["samples_per_s/mean"] == 75.0


def test_parent_run_holds_mean_min_max_sum_per_step_equal_to_numpy_over_the_children(tracking_env, tmp_path):
    plan = make_plan(tmp_path, 3)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    jt.start()
    rng = np.random.default_rng(7)
    for rank in range(3):
        t = Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env({**plan.ranks[rank].env, **env}))
        for step in range(40 if rank != 2 else 25):  # rank 2 stops early (its steps end at flush)
            if rank == 1 and step == 5:
                continue  # rank 1 skips a step
            t.log_metric("loss", float(rng.normal(1.0 / (step + 1), 0.05)), step=step)
            t.log_metric("samples_per_s", float(rng.uniform(90, 110)), step=step)
        t.close()
    report = jt.finish(Ok())
    assert report.pending == 0 and report.wait_ended()  # the last steps go in as the job ends

    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    children = child_runs(c, report.parent_run_id)
    assert len(children) == 3
    for name in ("loss", "samples_per_s"):
        per_step = defaultdict(list)
        for run in children:
            for m in c.get_metric_history(run.info.run_id, name):
                per_step[m.step].append(m.value)
        steps = sorted(per_step)
        expected = {"mean": [np.mean(per_step[s]) for s in steps], "min": [np.min(per_step[s]) for s in steps],
                    "max": [np.max(per_step[s]) for s in steps]}
        if name == "samples_per_s":
            expected["sum"] = [np.sum(per_step[s]) for s in steps]
        for stat, values in expected.items():
            history = sorted(c.get_metric_history(report.parent_run_id, f"{name}/{stat}"), key=lambda m: m.step)
            assert [m.step for m in history] == steps, (name, stat)
            assert [m.value for m in history] == pytest.approx(values, rel=1e-12), (name, stat)
    assert c.get_metric_history(report.parent_run_id, "loss/sum") == []  # not a throughput


def test_streams_advance_together_so_no_step_is_aggregated_before_every_rank_delivered_it(
        tracking_env, tmp_path, monkeypatch):
    """One worker forwarding whole streams one after the other used to hold the first rank's
    steps open past the cap and emit them with that rank's value alone (and again later with the
    others'). Streams now take turns a batch at a time: every step is aggregated once, whole."""
    import time

    from platform_plugin.tracking.delivery import helper as delivery
    from platform_plugin.tracking.shared import aggregates
    from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
    from platform_plugin.tracking.shared.state import JobEnd
    monkeypatch.setattr(aggregates, "MAX_OPEN_STEPS", 50)
    monkeypatch.setattr(MlflowSink, "sql_limits", {**MlflowSink.sql_limits, "m": 20, "total": 20})
    monkeypatch.setattr(delivery, "STREAM_WORKERS", 1)
    plan = make_plan(tmp_path, 3)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    for rank in range(3):
        t = Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env({**plan.ranks[rank].env, **env}))
        for step in range(300):
            t.log_metric("loss", float(rank + step), step=step)
        t.close()
    JobEnd("FINISHED", time.time() + 120).save(jt.spool_dir)
    helper = delivery.Helper(jt.spool_dir)  # the helper's work, in this process
    helper.run()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = c.get_metric_history(helper.config.parent_run_id, "loss/mean")
    assert sorted((m.step, m.value) for m in history) == [(s, s + 1.0) for s in range(300)]


def test_a_step_logged_again_is_the_next_pass_whatever_rank_arrives_first():
    """`log_metric("loss", v, step=epoch)` at every batch: each rank logs step 0 three times.
    Before, the aggregate depended on which rank's batch the forwarder delivered first (the
    second point of rank 0 overwrote its first while step 0 was open, or came "late" after it
    was emitted) and helper.log blamed a rank 10,000 steps behind; now the n-th point of each
    rank goes with the others' n-th, as the children's histories hold them."""
    def means(order):
        agg = StepAggregator(["0", "1"])
        out = []
        for rank, batch in order:
            out += agg.add_batch(rank, [["m", "loss", float(10 * int(rank) + batch), 0, 1000]])
        out += agg.flush()
        return [(p.step, p.value) for p in out if p.key == "loss/mean"], agg.late
    expected = ([(0, 5.0), (0, 6.0), (0, 7.0)], 0)
    assert means([("0", b) for b in range(3)] + [("1", b) for b in range(3)]) == expected
    assert means([(r, b) for b in range(3) for r in "01"]) == expected


def test_a_step_outside_int64_is_left_out_and_does_not_shift_the_ranks_passes():
    """`step=2**70` (no MLflow step: a file store may still take the child's point): its key ran
    into the next pass, so every later point of that rank went to pass 1 and was aggregated
    with nothing - the parent's means of the whole job were one-rank values."""
    agg = StepAggregator(["0", "1"])
    out = agg.add_batch("0", [["m", "loss", 9.0, 2 ** 70, 1]])
    out += agg.add_batch("0", [["m", "loss", 1.0, s, 1] for s in range(3)])
    out += agg.add_batch("1", [["m", "loss", 3.0, s, 1] for s in range(3)])
    out += agg.flush()
    assert [(p.step, p.value) for p in out if p.key == "loss/mean"] == [(s, 2.0) for s in range(3)]
    assert agg.outside == 1 and agg.late == 0
    from platform_plugin.tracking.shared import aggregates
    jobs = aggregates.JobAggregates(["0", "1"], sink=None, config=None)
    jobs.aggregator = agg
    assert "1 points with a step outside MLflow's 64-bit range" in jobs.problems()


class Recording:
    """A sink's `deliver_aggregates` that keeps what it was given."""

    def __init__(self):
        self.points: list = []

    def deliver_aggregates(self, config, points) -> None:
        self.points += [(p.key, p.step, p.value) for p in points]


def test_what_was_sent_is_recorded_so_a_later_pass_over_the_same_points_sends_only_the_rest(tmp_path):
    """The helper sends the aggregates of steps 0-1 and dies; `sync` feeds the same points back
    (read from the spools) plus the rest: it sends steps 2-3 only, the last one a pass of its
    own after the step counter went back."""
    from platform_plugin.tracking.shared.aggregates import SENT_FILE, JobAggregates
    first, later = Recording(), Recording()
    helper = JobAggregates(["0", "1"], first, None, spool_dir=str(tmp_path))
    for label, value in (("0", 1.0), ("1", 3.0)):
        helper.delivered(label, [["m", "loss", value, s, 1] for s in range(2)])
    assert helper.send() and (tmp_path / SENT_FILE).exists()
    assert sorted(step for key, step, _ in first.points if key == "loss/mean") == [0, 1]
    sync = JobAggregates(["0", "1"], later, None, spool_dir=str(tmp_path))
    for label, value in (("0", 1.0), ("1", 3.0)):
        sync.delivered(label, [["m", "loss", value, s, 1] for s in (0, 1, 2, 0)])
    assert sync.finish()
    assert [(step, v) for key, step, v in later.points if key == "loss/mean"] == [(2, 2.0), (0, 2.0)]


def test_a_job_on_several_servers_gets_its_aggregates_from_the_store_once_its_parent_ended(
        tracking_env, tmp_path):
    """mlflow_aggregates (what a late `sync` runs): nothing while the parent runs; once it
    ended, NAME/mean|min|max over every rank run of the job in the store, one point per step,
    a rank's replayed steps read as its latest attempt's; done again, nothing is added (exact
    repeats); a store that cannot be read is said, never raised."""
    from mlflow.entities import Metric

    from platform_plugin.tracking.shared.state import SinkConfig
    from platform_plugin.tracking.sinks import mlflow_aggregates, mlflow_job
    from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sink = MlflowSink()
    c = sink.client(uri)
    exp = c.create_experiment("several-servers")
    parent = c.create_run(exp, tags={"job_id": "j", mlflow_job.ROLE_TAG: "job"}).info.run_id
    want: dict[int, list[float]] = defaultdict(list)
    for rank in range(4):
        tags = {"mlflow.parentRunId": parent, "rank_id": str(rank), "server_id": f"node{rank // 2}"}
        if rank == 3:  # a second attempt started at t=5000 and logged steps 3 and 4 again
            tags[mlflow_job.ATTEMPT_STARTED_TAG + "2"] = "5000"
        run = c.create_run(exp, tags=tags).info.run_id
        c.log_batch(run, metrics=[Metric("m", rank * 10 + s, 1000 + s, s) for s in range(5)])
        if rank == 3:
            c.log_batch(run, metrics=[Metric("m", 100 + s, 6000 + s, s) for s in (3, 4)])
        for s in range(5):
            want[s].append(100 + s if rank == 3 and s >= 3 else rank * 10 + s)
    config = SinkConfig("mlflow", tracking_uri=uri, experiment_id=exp, parent_run_id=parent,
                        job={"servers": 2, "parent": True})

    assert mlflow_aggregates.when_parent_ended(sink, config, uri) == ""
    assert c.get_metric_history(parent, "m/mean") == []  # the server that ends it sends them
    c.set_terminated(parent, "FINISHED")
    for _ in range(2):
        assert mlflow_aggregates.when_parent_ended(sink, config, uri) == ""
        for stat, numpy_stat in (("mean", np.mean), ("min", np.min), ("max", np.max)):
            history = c.get_metric_history(parent, f"m/{stat}")
            assert sorted(m.step for m in history) == list(range(5)), stat
            assert {m.step: m.value for m in history} == pytest.approx(
                {s: float(numpy_stat(v)) for s, v in want.items()}, rel=1e-12), stat

    class Unreadable:
        def search_runs(self, *args, **kwargs):
            raise OSError("store unreachable")
    said = mlflow_aggregates.job_wide(Unreadable(), config, sink)
    assert "job-wide aggregates" in said and "store unreachable" in said
    assert sink.aggregates_problem == said
