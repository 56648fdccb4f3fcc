"""`platform-run compare`: the per-rank table, flags, several metrics, plot and tables logged to
the job's run, the MLflow URL (the pages themselves in a browser: test_ui_browser.py)."""
from __future__ import annotations

import os
from dataclasses import astuple
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlsplit
import json

import pytest
from hypothesis import given, settings, strategies as st

from platform_plugin.cli import main
from platform_plugin.comparison.spools import all_here, rank_labels, read_points
from platform_plugin.comparison.store import StorePoints, with_store_ranks
from platform_plugin.comparison.table import Point, job_runs, mlflow_colour, rank_rows
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.job.handle import JobTracking
from platform_plugin.tracking.rank.tracker import Tracker
from tests.helpers import REPO, wait_for
from tests.test_layout import HEAVY
from tests.tracking.helpers import child_runs, client, make_plan



def series(final_values, seconds_per_step, steps=20):
    return {str(rank): [Point(s, 1.0 / (s + 1) + final, int(1000 * s * seconds_per_step[rank]))
                        for s in range(steps)]
            for rank, final in enumerate(final_values)}


def test_straggler_and_deviating_rank_are_flagged():
    rows = rank_rows(series([0.1, 0.1, 0.1, 0.5], [0.1, 0.1, 0.3, 0.1]), "loss")
    assert [r.label for r in rows] == ["0", "1", "2", "3"]
    assert [r.flags for r in rows] == [[], [], ["straggler"], ["deviates"]]
    assert rows[2].steps_per_s == pytest.approx(19 / (19 * 0.3))
    assert rows[0].best == pytest.approx(rows[0].final) and rows[0].steps == 20


def test_the_chart_draws_a_rank_in_the_colour_mlflow_gives_its_run():
    """MLflow 3.17's metric page drew these runs (a JupyterLab test's, screenshot read) in
    these colours of its palette: navy for rank-07, dark green for rank-04."""
    assert mlflow_colour("70856b9bad0f44acaafd0e47abaa37d6") == "#0e538b"
    assert mlflow_colour("28d8310ff3ef47d882e313f025dba307") == "#115026"
    assert mlflow_colour("6610a3f5cd7044c7a361118e5f65c47c") == "#be501e"


def test_best_is_max_for_accuracy_like_metrics():
    points = {"0": [Point(0, 0.2, 0), Point(1, 0.9, 1000), Point(2, 0.7, 2000)]}
    assert rank_rows(points, "accuracy")[0].best == 0.9
    assert rank_rows(points, "val_loss")[0].best == 0.2


@settings(deadline=None, max_examples=40)
@given(n=st.integers(2, 8), final=st.floats(-10, 10), pace=st.floats(0.01, 1))
def test_identical_ranks_are_never_flagged(n, final, pace):
    rows = rank_rows(series([final] * n, [pace] * n), "loss")
    assert len(rows) == n and not any(r.flags for r in rows)


# rank 1 sleeps 50x longer per step: flagged as the straggler however much a loaded machine
# stretches rank 0's short sleeps (rank 0 would need > 40 ms per step to look as slow)
SLOW_RANK_1 = (0.001, 0.05)


def make_job(tmp_path, lags=(0.0, 0.0)):
    """A 2-rank job in a sqlite store, written by real trackers and the real forwarder."""
    plan = make_plan(tmp_path, 2)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    for rank in (0, 1):
        t = Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env({**plan.ranks[rank].env, **env}))
        for step in range(30):
            t.log_metric("loss", 2.0 / (step + 1) + 0.3 * rank)
            time.sleep(lags[rank])  # rank 1 is made far slower: the straggler
        t.close()

    class Ok:
        ok = True
    report = jt.finish(Ok())
    assert report.pending == 0
    return plan, report


def test_compare_cli_table_plot_and_url(tracking_env, tmp_path, capsys):
    plan, report = make_job(tmp_path, lags=SLOW_RANK_1)
    png = tmp_path / "ranks.png"
    assert main(["compare", "--plot", str(png), "--url", "--ui", "http://127.0.0.1:5999"]) == 0
    out = capsys.readouterr().out
    table = {line.split()[0]: line for line in out.splitlines() if line.startswith("rank-")}
    assert set(table) == {"rank-00", "rank-01"}
    assert "straggler" in table["rank-01"] and "deviates" not in out  # two ranks: no odd one out
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    wait_for(lambda: sorted(a.path for a in c.list_artifacts(report.parent_run_id, "compare"))
             == ["compare/loss.json", "compare/ranks.png"], timeout=120,
             what="the table (log_table) and the plot logged by compare's own process")

    url = next(line for line in out.splitlines() if line.startswith("http://127.0.0.1:5999/#/metric?"))
    # nothing listens there: said under the link, with what to do
    assert "note: nothing answers at http://127.0.0.1:5999/health: start that MLflow server" in out
    query = parse_qs(urlsplit(url.replace("/#/", "/")).query)
    children = child_runs(c, report.parent_run_id)
    by_rank = sorted(children, key=lambda r: int(r.data.tags["rank_id"]))
    assert json.loads(query["runs"][0]) == [r.info.run_id for r in by_rank]  # the legend's order

    assert json.loads(query["metric"][0]) == "loss" and json.loads(query["plot_metric_keys"][0]) == ["loss"]
    assert json.loads(query["experiments"][0]) == [children[0].info.experiment_id]
    assert main(["compare", plan.job_id, "--metric", "nonexistent"]) == 2
    assert "no rank logged 'nonexistent'; its metrics: loss" in capsys.readouterr().err


def test_compare_run_again_replaces_its_table_and_prints_no_progress_bar(tracking_env, tmp_path, capsys):
    """MLflow's log_table downloads the table a first compare logged and appends to it: the
    logged table had every rank once more per compare, and tqdm's "Downloading artifacts" bar
    was drawn on stderr (in a terminal, in a cell)."""
    plan, report = make_job(tmp_path)
    spool_dir = tmp_path / "platform_logs" / plan.job_id / "tracking"
    for _ in range(2):
        assert main(["compare", plan.job_id]) == 0
        captured = capsys.readouterr()
        assert "rank-01" in captured.out
        assert "Downloading artifacts" not in captured.err and "it/s" not in captured.err, captured.err
    wait_for(lambda: not list(spool_dir.glob(".compare-*.json")), timeout=120,
             what="both compares' tables logged")
    log = (spool_dir / "compare.log").read_text()
    assert log.count("compare: logged compare/loss.json") == 2 and "Downloading" not in log, log
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (tmp_path / "got").mkdir()
    got = c.download_artifacts(report.parent_run_id, "compare/loss.json", str(tmp_path / "got"))
    with open(got, encoding="utf-8") as fh:
        table = json.load(fh)
    assert [row[0] for row in table["data"]] == ["rank-00", "rank-01"] and table["columns"][0] == "rank"


# per-shard end losses of 8 data-parallel ranks spread by more than 10 % by nature; rank 5 is
# the one real outlier. The old relative-only test flagged most of them.
SHARD_SPREAD = [0.0, 0.17, -0.15, 0.12, -0.2, 0.0, 0.08, -0.11]
OUTLIER = 5


def test_eight_ranks_flag_only_the_real_outlier_and_several_metrics_at_once(tracking_env, tmp_path, capsys):
    plan = make_plan(tmp_path, 8)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    for rank in range(8):
        t = Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env({**plan.ranks[rank].env, **env}))
        end = 0.1 * (1 + SHARD_SPREAD[rank]) + (0.25 if rank == OUTLIER else 0.0)
        for step in range(30):
            t.log_metric("loss", end + 1.0 / (step + 1) ** 2, step=step)
            t.log_metric("samples_per_s", 400.0 + rank, step=step)
        t.close()
    jt.start()

    class Ok:
        ok, status = True, "succeeded"
    assert jt.finish(Ok()).pending == 0
    assert main(["compare", "--metric", "loss,samples_per_s", "--metric", "loss"]) == 0
    out = capsys.readouterr().out
    tables = out.split("last samples_per_s")
    assert len(tables) == 2 and "last loss" in tables[0]  # two tables, loss once
    flagged = [line.split()[0] for line in tables[0].splitlines()
               if "deviates" in line and line.startswith("rank-")]
    assert flagged == [f"rank-0{OUTLIER}"]
    # a line under the table says why, as the straggler's does
    why = next(line for line in tables[0].splitlines() if line.startswith("deviates "))
    assert why.startswith(f"deviates rank-0{OUTLIER}: its end value (the mean of its last tenth")
    assert "vs the other ranks' median" in why and "%), an outlier among them" in why, why
    header = next(line for line in tables[1].splitlines() if "mean samples_per_s" in line)
    assert "steps/s" not in header  # a throughput is its own pace, not a step rate
def test_compare_unknown_job_is_a_configuration_error(tracking_env, capsys):
    assert main(["compare", "no-such-job"]) == 2
    assert "no tracked job 'no-such-job'" in capsys.readouterr().err


def test_a_local_job_is_compared_from_its_spools_without_mlflow(tracking_env, tmp_path):
    """The spools hold every point the store has (same series), and `platform-run compare` of
    a job that ran here answers without importing MLflow (its import alone takes seconds), nor
    any other heavy library, nor the launcher's modules (its options: the shared flags' help
    needs only the variable's name)."""
    plan, report = make_job(tmp_path)
    spool_dir = tmp_path / "platform_logs" / plan.job_id / "tracking"
    runs = job_runs(spool_dir)
    assert all_here(spool_dir, runs.config)
    local = read_points(spool_dir, rank_labels(spool_dir, runs.config))
    in_store = StorePoints(with_store_ranks(runs, client(runs.config.tracking_uri)),
                           client(runs.config.tracking_uri))
    assert local.metrics() == in_store.metrics() == ["loss"]
    assert {lb: sorted(map(astuple, p)) for lb, p in local.series("loss").items()} == \
        {lb: sorted(map(astuple, p)) for lb, p in in_store.series("loss").items()}
    code = ("import sys; from platform_plugin.cli import main; rc = main(['compare']); "
            "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{HEAVY!r} or m.startswith('platform_plugin.launcher'))); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout and "rank-01" in done.stdout, done.stdout
    wait_for(lambda: not list(spool_dir.glob(".compare-*.json")), timeout=120,
             what="the table logged by compare's own process")


def test_without_metric_compare_takes_loss_else_the_first_metric_and_says_so(tracking_env, tmp_path, capsys):
    plan = make_plan(tmp_path, 2)
    jt = JobTracking.create("mlflow", plan)
    env = jt.prepare()
    for rank in (0, 1):
        t = Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"], RankIdentity.from_env({**plan.ranks[rank].env, **env}))
        for step in range(5):
            t.log_metric("val_acc", 0.5 + 0.1 * step, step=step)
            t.log_metric("accuracy", 0.4 + 0.1 * step, step=step)
        t.close()

    class Ok:
        ok, status = True, "succeeded"
    assert jt.finish(Ok()).pending == 0
    assert main(["compare", plan.job_id]) == 0
    out = capsys.readouterr().out
    assert "no rank logged 'loss': comparing 'accuracy', the first of its metrics (accuracy, " \
           "val_acc); --metric picks another" in out
    assert "last accuracy" in out and "rank-01" in out
    spool_dir = tmp_path / "platform_logs" / plan.job_id / "tracking"
    wait_for(lambda: not list(spool_dir.glob(".compare-*.json")), timeout=120,
             what="the table logged by compare's own process")


def test_compare_url_says_when_no_ui_answers_and_how_to_start_one(monkeypatch):
    """The default link points at `platform-run ui`'s address: when nothing answers there the
    note says so and how to start it; a UI that answers gets no note."""
    import http.server
    import threading

    from platform_plugin.cli import compare as compare_cli
    from tests.tracking.helpers import refused_url
    with refused_url() as url:
        monkeypatch.setattr(compare_cli, "DEFAULT_UI", url)
        said = compare_cli.ui_silence(url, None)
    assert said.startswith(f"note: no MLflow UI answers at {url} (nothing is running there)")
    assert "`platform-run ui`" in said

    class Health(http.server.BaseHTTPRequestHandler):  # answers /health as MLflow's UI does
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert compare_cli.ui_silence(f"http://127.0.0.1:{server.server_port}", None) == ""
    finally:
        server.shutdown()
        server.server_close()
