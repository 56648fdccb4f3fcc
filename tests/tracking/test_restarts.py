"""A restarted job's tracking reads as one curve per rank: the attempt that resumes from a
checkpoint goes on in the rank's run, and every reader (compare from the spools or from the
store, %dist_compare, the parent's aggregates) keeps the latest attempt's value of a step
logged twice (docs/tracking.md, Restarts). Real launcher subprocess, real MLflow store."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from platform_plugin.tracking.shared.attempts import by_attempt, stitched
from platform_plugin.comparison.store import StorePoints, with_store_ranks
from platform_plugin.comparison.table import job_runs
from platform_plugin.tracking.shared.job_folders import spool_dirs_of
from platform_plugin.tracking.delivery.replay import sync_spool_dir
from platform_plugin.tracking.shared.state import JobEnd
from platform_plugin.tracking.job.handle import JobTracking
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.rank.tracker import Tracker
from platform_plugin.tracking.sinks.mlflow_job import ROLE_TAG, attempt_starts, job_children
from tests.helpers import REPO, clean_env
from tests.launcher.helpers import finish_all, free_port_pair, kill_jobs, start_cli
from tests.tracking.helpers import ASSETS, child_runs, client, hold_port, make_plan, wait_for
from tests.tracking.test_ui_browser import headless_chromium, start_ui

PY = sys.executable


def test_a_later_attempt_replaces_the_steps_it_logged_again():
    first = [(s, s, 10 + s) for s in range(0, 66)]  # attempt 0: steps 0..65
    second = [(s, 1000 + s, 200 + s) for s in range(60, 100)]  # resumed at 60
    curve = stitched([first, second])
    assert [p[0] for p in curve] == list(range(100))
    assert [p[1] for p in curve] == list(range(60)) + [1000 + s for s in range(60, 100)]


def test_an_earlier_attempt_past_the_resume_point_is_cut_even_where_not_logged_again():
    """Steps the failed attempt logged beyond the checkpoint belong to a lost trajectory: a
    later attempt that logs sparsely (every 10 steps) still supersedes them."""
    first = [(s, 0.0, s) for s in range(0, 70)]
    second = [(s, 1.0, 100 + s) for s in range(60, 100, 10)]
    assert [p[0] for p in stitched([first, second])] == list(range(60)) + list(range(60, 100, 10))


def test_one_attempt_keeps_a_step_logged_several_times():
    """A counter reset every epoch logs each step once per epoch: within an attempt nothing goes."""
    points = [(s, e, e * 10 + s) for e in range(3) for s in range(5)]
    assert stitched(by_attempt(points, [])) == points


def test_a_run_history_is_split_at_the_attempts_starts():
    points = [(0, 0.0, 100), (1, 0.0, 199), (0, 1.0, 200), (1, 1.0, 250), (1, 2.0, 300)]
    assert by_attempt(points, [200, 300]) == [points[:2], points[2:4], points[4:]]
    assert attempt_starts({"platform.attempt_started.3": "300", "attempt": "3",
                           "platform.attempt_started.2": "200"}) == [200, 300]


def test_the_attempts_spool_folders_come_in_the_attempts_order(tmp_path):
    """Attempt K's folder is `tracking-attempt-K`; an earlier version's `tracking-attemptK` is
    read as well."""
    for name in ("tracking", "tracking-attempt-10", "tracking-attempt2", "tracking-attempt-9"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sink.json").write_text("{}")
    assert [p.name for p in spool_dirs_of(tmp_path)] == \
        ["tracking", "tracking-attempt2", "tracking-attempt-9", "tracking-attempt-10"]


def _log_attempt(plan, env, attempt: int, steps) -> None:
    for rank in (0, 1):
        tracker = Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"],
                          RankIdentity.from_env({**plan.ranks[rank].env, **env}))
        for step in steps:
            tracker.log_metric("m", step + 1000 * (attempt - 1) + rank / 10, step=step)
        tracker.close()


def test_an_earlier_attempt_synced_late_goes_into_the_runs_the_later_one_made(tracking_env, tmp_path):
    """Attempt 1's points never reached the store (its helper could not deliver them: here it
    never ran); attempt 2 resumed at step 60 and its helper made the job's runs. `sync` of
    attempt 1 then delivers into those runs - no second parent, no second run per rank - and
    leaves them as attempt 2 ended them (FINISHED, not attempt 1's FAILED)."""
    first = make_plan(tmp_path, 2)
    attempt_0 = JobTracking.create("mlflow", first)
    env_0 = attempt_0.prepare()
    _log_attempt(first, env_0, 1, range(0, 66))
    JobEnd("FAILED", time.time(), reason="rank 1 exit 3", last=False).save(attempt_0.spool_dir)
    # attempt 2 starts in a later millisecond than attempt 1's last point, as a launcher's
    # restart does (the ranks stopped and reaped, new ones spawned): here it would be the same
    time.sleep(0.01)

    second = dataclasses.replace(first, attempt=2)
    attempt_1 = JobTracking.create("mlflow", second)
    env_1 = attempt_1.prepare()
    _log_attempt(second, env_1, 2, range(60, 100))

    class Ok:
        ok = True
    report = attempt_1.finish(Ok())
    assert report.pending == 0 and report.wait_ended()
    synced = sync_spool_dir(Path(attempt_0.spool_dir))
    assert synced.delivered_now == 2 * 66 and synced.ended and not synced.error

    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [parent] = c.search_runs([c.get_run(report.parent_run_id).info.experiment_id],
                             f"tags.`{ROLE_TAG}` = 'job'")
    assert parent.info.run_id == report.parent_run_id and parent.info.status == "FINISHED"
    children = child_runs(c, parent.info.run_id)
    assert [(r.info.run_name, r.info.status, r.data.tags["attempt"]) for r in children] == \
        [("rank-00", "FINISHED", "2"), ("rank-01", "FINISHED", "2")]
    runs = job_runs(Path(attempt_1.spool_dir))
    curves = StorePoints(with_store_ranks(runs, c), c).series("m")
    for rank in (0, 1):
        assert len(c.get_metric_history(runs.run_ids[str(rank)], "m")) == 66 + 40
        assert [p.value for p in curves[str(rank)]] == pytest.approx(
            [s + (1000 if s >= 60 else 0) + rank / 10 for s in range(100)])


@pytest.mark.slow
def test_a_resumed_job_reads_as_one_curve_per_rank(tracking_env, tmp_path):
    """rank 1 fails after step 65 of attempt 0; attempt 1 resumes both ranks from the step-60
    checkpoint. The store keeps both attempts' points of steps 60..65 (MLflow keeps every
    value of a step); compare, %dist_compare, the store's reading and the parent's aggregates
    show 100 points per rank, attempt 1's where it logged a step again. MLflow's page of the
    ranks draws one line per rank, whose latest value is attempt 1's (with
    UPDATE_SCREENSHOTS=1 its screenshot replaces docs/mlflow-restart.png)."""
    shutil.copy(ASSETS / "resume_steps.py", tmp_path / "resume_steps.py")
    launched = subprocess.run(
        [PY, "-m", "platform_plugin", "launch", "--nproc", "2", "--backend", "plain",
         "--tracking", "mlflow", "--max-restarts", "1", "--no-system-metrics", "--",
         PY, "resume_steps.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    [job_dir] = (tmp_path / "platform_logs").iterdir()
    attempts = spool_dirs_of(job_dir)
    assert [p.name for p in attempts] == ["tracking", "tracking-attempt-2"]
    expected = {rank: [s + (1000 if s >= 60 else 0) + rank / 10 for s in range(100)]
                for rank in (0, 1)}

    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = job_runs(attempts[-1])
    parent = runs.config.parent_run_id
    wait_for(lambda: c.get_run(parent).info.status == "FINISHED", timeout=120,
             what="the helper ended the job's run")
    children = child_runs(c, parent)
    assert [r.info.run_name for r in children] == ["rank-00", "rank-01"]  # one run per rank
    assert job_runs(attempts[0]).run_ids == runs.run_ids  # attempt 1 went on in them
    for rank, run in enumerate(children):
        assert run.data.tags["attempt"] == "2" and run.info.status == "FINISHED"
        assert run.data.metrics["m"] == pytest.approx(expected[rank][-1])
        raw = c.get_metric_history(run.info.run_id, "m")
        assert {m.step for m in raw} == set(range(100))
        if rank == 1:  # what the store holds: 0..65, then 60..99 again
            assert len(raw) == 66 + 40
    store_points = StorePoints(with_store_ranks(runs, c), c)
    for rank in (0, 1):
        curve = store_points.series("m")[str(rank)]
        assert [p.step for p in curve] == list(range(100))
        assert [p.value for p in curve] == pytest.approx(expected[rank])

    # the parent's m/mean: both attempts' steps 60.. are stored, the latest reads
    history = [(m.step, m.value, m.timestamp) for m in c.get_metric_history(parent, "m/mean")]
    assert {p[0] for p in history} == set(range(100))
    starts = attempt_starts(c.get_run(parent).data.tags)
    assert len(starts) == 1
    mean = stitched(by_attempt(history, starts))
    assert [p[0] for p in mean] == list(range(100))
    assert [p[1] for p in mean] == pytest.approx([(a + b) / 2 for a, b in zip(expected[0], expected[1])])
    latest = {}
    for step, value, timestamp in sorted(history, key=lambda p: p[2]):
        latest[step] = value
    assert [latest[s] for s in range(100)] == pytest.approx([p[1] for p in mean])

    # platform-run compare (the spools of both attempts) and %dist_compare's reading
    compared = subprocess.run([PY, "-m", "platform_plugin", "compare", "--metric", "m"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    rows = {line.split()[0]: line.split() for line in compared.stdout.splitlines()
            if re.match(r"rank-0[01] ", line)}
    assert sorted(rows) == ["rank-00", "rank-01"], compared.stdout
    for rank, name in enumerate(("rank-00", "rank-01")):
        last, best, points = rows[name][1:4]
        assert int(points) == 100 and float(last) == pytest.approx(expected[rank][-1], rel=1e-3)

    from platform_plugin.comparison.view import compare
    shown = compare(str(job_dir), "m", ui=False, show=False)
    for rank in (0, 1):
        curve = shown.series[str(rank)]
        assert [p.step for p in curve] == list(range(100))
        assert [p.value for p in curve] == pytest.approx(expected[rank])
    assert json.loads((attempts[-1] / "sink.json").read_text())["job"]["attempt_number"] == 2

    mlflow_page(tmp_path, f"{expected[1][-1]:g} (step=99)", f"{expected[1][0]:g} (step=0)")


def mlflow_page(folder: Path, latest: str, first: str) -> None:
    """`platform-run ui --metric m`'s comparison page in headless Chromium: each rank is one run
    (one line) holding both attempts: its Latest is attempt 1's, its Min attempt 0's step 0."""
    from playwright.sync_api import sync_playwright
    held = hold_port()  # the UI's server binds it alongside; nobody else can take it meanwhile
    port = held.getsockname()[1]
    ui, url = start_ui(folder, port, "--metric", "m")
    try:
        with sync_playwright() as p:
            browser = headless_chromium(p)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(url, wait_until="load", timeout=120_000)
                page.get_by_text("rank-01 (m)").wait_for(timeout=120_000)  # the chart legend
                page.locator(".js-plotly-plot g.trace").first.wait_for(timeout=60_000)
                page.get_by_text(latest).first.wait_for(timeout=60_000)  # Latest and Max: attempt 1's
                body = page.inner_text("body")
                assert "Comparing 2 Runs" in body and "rank-00 (m)" in body
                assert first in body  # rank-01's Min: attempt 0's step 0, in the same run
                close = page.locator("[aria-label='Close'], [aria-label='close']")
                if close.count():  # the assistant side panel opens itself on a local server
                    close.first.click()
                page.wait_for_timeout(800)
                shot = (REPO / "docs" if os.environ.get("UPDATE_SCREENSHOTS") == "1" else folder)
                page.screenshot(path=str(shot / "mlflow-restart.png"))
            finally:
                browser.close()
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # `platform-run ui` stops its server on SIGTERM
        ui.wait(30)
        held.close()


@pytest.mark.slow
def test_a_job_across_servers_goes_on_in_each_ranks_run(tmp_path, postgres_mlflow):
    """Two servers (one launcher and one rank each, a shared --checkpoint-dir) tracked into the
    team server (its bulk route: the helper's REST client marks a continued run RUNNING
    again): each server's helper goes on in its own rank's run, and `compare`, which reads
    the ranks of a job across servers from the store, shows 100 points per rank, attempt 1's
    where it logged a step again."""
    experiment = f"resume-{uuid.uuid4().hex[:8]}"
    shutil.copy(ASSETS / "resume_steps.py", tmp_path / "resume_steps.py")
    env = clean_env(MLFLOW_TRACKING_URI=postgres_mlflow, MLFLOW_EXPERIMENT_NAME=experiment,
                    PLATFORM_TRACKING_DRAIN_TIMEOUT="90")
    port = free_port_pair()
    procs = [start_cli(["--tracking", "mlflow", "--nproc", "1", "--nnodes", "2", "--node-rank",
                        str(node), "--master-port", str(port), "--backend", "plain", "--show",
                        "none", "--max-restarts", "1", "--no-system-metrics", "--checkpoint-dir",
                        str(tmp_path / "shared"), "--", PY, "resume_steps.py"],
                       tmp_path / f"server{node}", cwd=str(tmp_path), env=env)
             for node in (0, 1)]
    outs = finish_all(procs, timeout=240)
    try:
        assert [code for code, _ in outs] == [0, 0], outs
    finally:
        kill_jobs(tmp_path / f"server{node}" for node in (0, 1))
    c = client(postgres_mlflow)
    exp = c.get_experiment_by_name(experiment)

    def ended():
        found = c.search_runs([exp.experiment_id], f"tags.`{ROLE_TAG}` = 'job'")
        return found if found and found[0].info.status != "RUNNING" else None
    [parent] = wait_for(ended, timeout=120, interval=0.5, what="the job's run ended")
    assert parent.info.status == "FINISHED"
    children = job_children(c, exp.experiment_id, parent.info.run_id)
    assert sorted((r.data.tags["rank_id"], r.info.run_name) for r in children) == \
        [("0", "rank-00"), ("1", "rank-01")]
    for run in children:
        assert run.data.tags["attempt"] == "2"
        wait_for(lambda: c.get_run(run.info.run_id).info.status == "FINISHED", timeout=120,
                 what="the rank's run ended")
    [job_dir] = list((tmp_path / "server0").iterdir())
    shown = subprocess.run([PY, "-m", "platform_plugin", "compare", job_dir.name, "--log-dir",
                            str(tmp_path / "server0"), "--metric", "m"], capture_output=True,
                           text=True, timeout=120, cwd=str(tmp_path), env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    rows = {line.split()[0]: line.split() for line in shown.stdout.splitlines()
            if re.match(r"rank-0[01] ", line)}
    assert sorted(rows) == ["rank-00", "rank-01"], shown.stdout
    for rank, name in enumerate(("rank-00", "rank-01")):  # rank, server, last, best, points
        assert rows[name][1] == f"node{rank}" and int(rows[name][4]) == 100, shown.stdout
        assert float(rows[name][2]) == pytest.approx(1099 + rank / 10, rel=1e-3)
