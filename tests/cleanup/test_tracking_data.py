"""Cleanup never deletes tracking data: a real MLflow sqlite store with artifacts in CODE/
(its rank logs match `*.log`), the store MLFLOW_TRACKING_URI names, and job folders whose
spool still holds undelivered records or unended runs (kept whole, said in the report)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from platform_plugin.cleanup import run as cleanup
from platform_plugin.cleanup.tracking_data import uri_paths
from platform_plugin.tracking.rank.spool import SpoolWriter, encode, encode_metric
from platform_plugin.tracking.shared.state import SinkConfig, StreamState

from tests.notebook.helpers import platform_run, snapshot, write_tree


def make_spool(job_dir: Path, points: int, *, delivered: bool, ended: bool | None = None) -> None:
    """A job folder as the launcher leaves it: rank logs, and a spool written by the tracking
    package's own writer; `delivered` marks every record sent, `ended` the runs ended (by
    default: when everything was delivered)."""
    write_tree(job_dir, {"rank_0.log": "rank output\n", "job.json": "{}"})
    spool = job_dir / "tracking"
    writer = SpoolWriter(spool / "rank_0.jsonl")
    writer.append(encode("p", "lr", "0.1"))
    for step in range(points):
        writer.append(encode_metric('"loss"', 1.0 / (step + 1), step, 1700000000000 + step))
    writer.close()
    SinkConfig(sink="mlflow", tracking_uri="sqlite:///elsewhere/mlflow.db", ended=delivered if ended is None else ended,
               ranks={"0": {"log_path": str(job_dir / "rank_0.log")}}).save(spool)
    if delivered:
        size = (spool / "rank_0.jsonl").stat().st_size
        StreamState(offset=size, delivered=points + 1).save(spool, "rank_0")


def test_spools_with_undelivered_records_or_unended_runs_are_kept_whole(tmp_path):
    root = tmp_path / "CODE"
    write_tree(root, {"train.py": "", "platform_logs/plain-job/rank_0.log": "x"})
    make_spool(root / "platform_logs" / "pending-job", 25, delivered=False)
    make_spool(root / "platform_logs" / "done-job", 25, delivered=True)
    make_spool(root / "exp" / "platform_logs" / "unended-job", 5, delivered=True, ended=False)
    before = snapshot(root)

    dry = cleanup.clean(root, dry_run=True)
    real = cleanup.clean(root)
    assert [(i.rel, i.files) for i in real.removed] == [(i.rel, i.files) for i in dry.removed]
    assert {i.rel for i in real.removed} == {"platform_logs/done-job", "platform_logs/plain-job"}
    assert sorted(real.kept) == sorted(dry.kept) == [
        "exp/platform_logs/unended-job/: its tracking runs were not ended yet "
        "(platform-run sync ends them)",
        "platform_logs/pending-job/: 26 tracking records not delivered yet "
        "(platform-run sync delivers them)"]
    kept = {p for p in before if "pending-job" in p or "unended-job" in p}
    assert kept <= snapshot(root)  # every file of those job folders, rank logs included
    assert "kept platform_logs/pending-job/: 26 tracking records" in real.render()


@pytest.mark.slow
def test_a_real_mlflow_store_in_code_and_the_configured_store_survive(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    root = tmp_path / "CODE"
    exp = root / "exp"
    write_tree(exp, {"train.py": "", "rank_1.log": "rank 1 says hi\n", "old.log": "x",
                     "mlruns/0/meta.log": "file store", "platform_logs/job/rank_0.log": "y",
                     # a default store left where a run's cwd was: inside a matched folder
                     "platform_logs/mlflow.db": "sqlite", "platform_logs/mlflow.db-wal": ""})
    db = exp / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    experiment = client.create_experiment("e", artifact_location=(exp / "mlartifacts").as_uri())
    run = client.create_run(experiment)
    client.log_metric(run.info.run_id, "loss", 0.5, step=1)
    client.log_artifact(run.info.run_id, str(exp / "rank_1.log"), "rank_1")
    client.set_terminated(run.info.run_id)
    artifact = next((exp / "mlartifacts").rglob("rank_1.log"))
    # a second store, named by MLFLOW_TRACKING_URI, inside a folder that matches a rule
    custom = root / "platform_logs" / "runs.db"
    write_tree(root, {"platform_logs/runs.db": "sqlite", "platform_logs/runs.db-wal": "",
                      "platform_logs/old-job/rank_0.log": "z"})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{custom}")

    report = cleanup.clean(root)
    assert not report.errors
    gone = {i.rel for i in report.removed}
    assert gone == {"exp/rank_1.log", "exp/old.log", "exp/platform_logs/job",
                    "platform_logs/old-job"}
    assert artifact.read_text() == "rank 1 says hi\n"
    assert db.exists() and (exp / "platform_logs" / "mlflow.db-wal").exists()
    assert (exp / "mlruns" / "0" / "meta.log").exists()
    assert custom.exists() and (root / "platform_logs" / "runs.db-wal").exists()
    # the store still opens and still serves the run's rank log
    reopened = MlflowClient(tracking_uri=f"sqlite:///{db}")
    assert reopened.get_metric_history(run.info.run_id, "loss")[0].value == 0.5
    assert [a.path for a in reopened.list_artifacts(run.info.run_id, "rank_1")] == \
        ["rank_1/rank_1.log"]

    # the CLI reads MLFLOW_TRACKING_URI from ROOT/.env too (a second job folder to clean)
    write_tree(root, {".env": f"MLFLOW_TRACKING_URI=sqlite:///{custom}\n",
                      "platform_logs/new-job/rank_0.log": "n"})
    done = platform_run("clean", "--root", str(root), "--list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "platform_logs/new-job/" in done.stdout and custom.exists()


def test_the_stores_every_env_file_of_the_rule_names_are_kept(tmp_path, monkeypatch):
    """The `.env` files a job started in CODE/ reads (util/envfile.py: CODE/'s and the project's
    beside it) name stores inside matched folders: all kept; an unrelated log folder goes."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("PLATFORM_CODE_DIR", raising=False)
    project = tmp_path / "project"
    root = project / "CODE"
    beside, inside = root / "platform_logs" / "team.db", root / "logs" / "own.db"
    write_tree(project, {".env": f"MLFLOW_TRACKING_URI=sqlite:///{beside}\n",
                         "CODE/.env": f"MLFLOW_TRACKING_URI=sqlite:///{inside}\n",
                         "CODE/train.py": "", "CODE/platform_logs/team.db": "sqlite",
                         "CODE/platform_logs/team.db-wal": "", "CODE/logs/own.db": "sqlite",
                         "CODE/logs/old.log": "x", "CODE/platform_logs/old-job/rank_0.log": "z"})
    report = cleanup.clean(root)
    assert not report.errors
    assert {i.rel for i in report.removed} == {"platform_logs/old-job", "logs/old.log"}
    assert beside.exists() and Path(f"{beside}-wal").exists() and inside.exists()
    # above the project folder the rule reads nothing: a store named there is not protected
    (project / ".env").unlink()
    (tmp_path / ".env").write_text(f"MLFLOW_TRACKING_URI=sqlite:///{beside}\n")
    write_tree(root, {"platform_logs/old-job/rank_0.log": "z"})
    assert "platform_logs" in {i.rel for i in cleanup.clean(root, dry_run=True).removed}


def test_uri_paths_cover_sqlite_companions_file_stores_and_nothing_for_servers(tmp_path):
    db = tmp_path / "m.db"
    assert set(uri_paths(f"sqlite:///{db}", bases=[tmp_path])) == {
        db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-journal"), Path(f"{db}.lock"),
        tmp_path / "mlartifacts"}
    assert {Path("/a/rel/m.db"), Path("/b/rel/m.db")} <= set(
        uri_paths("sqlite:///rel/m.db", bases=[Path("/a"), Path("/b")]))
    assert uri_paths(f"file://{tmp_path}/store", bases=[]) == [tmp_path / "store"]
    assert uri_paths("mlruns2", bases=[tmp_path]) == [tmp_path / "mlruns2"]
    for remote in ("http://127.0.0.1:5000", "https://h/x", "postgresql://u@h/db"):
        assert uri_paths(remote, bases=[tmp_path]) == []
    assert os.fspath(uri_paths("file:relative", bases=[tmp_path])[0]) == f"{tmp_path}/relative"
