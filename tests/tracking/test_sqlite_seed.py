"""A fresh sqlite store is a copy of MLflow's own empty schema (made once per MLflow version),
opened by MLflow as if it had just created it."""
from __future__ import annotations

import sqlite3

from platform_plugin.tracking.sinks import sqlite_seed
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink


def schema(db) -> list:
    with sqlite3.connect(db) as con:
        return sorted(con.execute("SELECT type, name, sql FROM sqlite_master").fetchall())


def test_the_second_fresh_store_is_a_copy_of_the_first_ones_schema(tracking_env, tmp_path):
    from mlflow.version import VERSION
    tracking_env.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))
    first, second = tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    c1 = MlflowSink().client(f"sqlite:///{first}")  # MLflow creates it: the template is kept
    c1.create_experiment("x")
    template = sqlite_seed.template_path(VERSION)
    assert template.is_file()
    with sqlite3.connect(template) as con:
        assert con.execute("SELECT count(*) FROM experiments").fetchone() == (0,)
    tracking_env.chdir(tmp_path / "b")
    c2 = MlflowSink().client(f"sqlite:///{second}")  # a copy, opened by MLflow
    assert schema(second) == schema(first)
    default = c2.get_experiment("0")
    assert default.name == "Default" and str(tmp_path / "b") in default.artifact_location
    experiment = c2.create_experiment("y")
    run = c2.create_run(experiment)
    c2.log_metric(run.info.run_id, "loss", 0.5, step=1)
    assert [m.value for m in c2.get_metric_history(run.info.run_id, "loss")] == [0.5]
    with sqlite3.connect(first) as a, sqlite3.connect(second) as b:
        assert (a.execute("SELECT version_num FROM alembic_version").fetchall()
                == b.execute("SELECT version_num FROM alembic_version").fetchall())


def test_no_template_or_an_existing_store_is_left_to_mlflow(tmp_path, monkeypatch):
    monkeypatch.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))
    db = tmp_path / "mlflow.db"
    assert not sqlite_seed.seed(db, "0.0-none")  # no template: MLflow creates the store
    db.write_bytes(b"")
    (tmp_path / "cache" / "mlflow-store-templates").mkdir(parents=True)
    sqlite_seed.template_path("0.0-none").write_bytes(b"x")
    assert not sqlite_seed.seed(db, "0.0-none") and db.read_bytes() == b""  # never overwritten
