"""How a tracking URI names its store, read as MLflow's SQLAlchemy reads it: a database URI
whose driver is not installed is refused before the job (was: the job ran, every point waited
out the drain and failed in the helper), and a `sqlite:///` URI's query string is the driver's
options, not part of the file's name (was: the store's lock and seed went to a second file
named `mlflow.db?timeout=30` beside the store MLflow really opened)."""
from __future__ import annotations

import os
import sys

import pytest

from platform_plugin.launcher import launch
from platform_plugin.tracking.shared.uri_check import sqlite_file, uri_problem
from tests.cli.helpers import run_inprocess
from tests.cli.test_refusals import refused
from tests.tracking.helpers import client

DATABASE_URIS = ["postgresql://u:p@127.0.0.1:1/db", "postgresql+psycopg2://u@127.0.0.1:1/db",
                 "postgresql+psycopg://u@127.0.0.1:1/db", "postgresql+pg8000://u@127.0.0.1:1/db",
                 "mysql://u@127.0.0.1:1/db", "mysql+pymysql://u@127.0.0.1:1/db",
                 "mysql+mysqlconnector://u@127.0.0.1:1/db", "mssql://u@127.0.0.1:1/db",
                 "mssql+pymssql://u@127.0.0.1:1/db"]


@pytest.mark.parametrize("uri", DATABASE_URIS)
def test_the_driver_check_agrees_with_sqlalchemy(uri):
    """The same question SQLAlchemy asks in create_engine (which loads the DBAPI module and
    connects only later): refused exactly when SQLAlchemy cannot load the driver."""
    assert (uri_problem(uri, {}) is None) == _sqlalchemy_loads(uri), (uri, uri_problem(uri, {}))


def _sqlalchemy_loads(uri: str) -> bool:
    import sqlalchemy
    try:
        sqlalchemy.create_engine(uri)
        return True
    except ImportError:
        return False


def test_a_database_uri_without_its_driver_refuses_the_launch(tmp_path, clean_environ):
    """This venv has psycopg2 but SQLAlchemy 2.1's default for postgresql:// is psycopg (3);
    the refusal names both the missing module and the spelling that works here."""
    uri = next(u for u in ("postgresql://u:p@127.0.0.1:1/db", "mysql://u@127.0.0.1:1/db")
               if not _sqlalchemy_loads(u))  # SQLAlchemy 2.0 (compat job) defaults to psycopg2
    clean_environ.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))
    clean_environ.setenv("MLFLOW_TRACKING_URI", uri)
    outcome = run_inprocess(["launch", "--nproc", "1", "--", "true"], tmp_path)
    refused(outcome, "TRACKING_URI")  # nothing created: no platform_logs/
    assert "is not installed" in outcome.text, outcome.text
    if uri.startswith("postgresql"):
        assert "+psycopg2://" in outcome.text, outcome.text  # the spelling that works here


@pytest.mark.parametrize("uri, name", [
    ("sqlite:///{d}/m.db?timeout=30", "m.db"), ("sqlite:///{d}/m.db?mode=ro", "m.db"),
    ("sqlite:///{d}/a%20b.db", None), ("sqlite+pysqlite:///{d}/m.db", "m.db"),
    ("sqlite:///file:{d}/m.db?mode=rwc&uri=true", "m.db"),
    ("sqlite:///file://{d}/m.db?uri=true", "m.db"), ("sqlite:///{d}/m.db?timeout=3&uri=true", "m.db"),
    ("sqlite:///{d}/m.db?mode=rwc&uri=true", "m.db?mode=rwc"),  # SQLite's plain name
    ("sqlite:///rel.db?cache=shared&uri=true", "rel.db?cache=shared"),
    # SQLite decodes a file: name's path itself, which ends at a '?' or '#' as written
    ("sqlite:///file:{d}/x%20y.db?uri=true", "x y.db"), ("sqlite:///file:x%2520y.db?uri=true", None),
    ("sqlite:///file:x%3Fy.db?mode=rwc&uri=true", None), ("sqlite:///file:x.db#f?uri=true", "x.db")])
@pytest.mark.filterwarnings("ignore:Query string argument")  # 2.1 on mode=ro without uri=true
def test_sqlite_file_is_the_file_sqlalchemy_and_sqlite_make(uri, name, tmp_path, monkeypatch):
    """The file that appears when SQLAlchemy (as MLflow does) opens the URI and writes."""
    import sqlalchemy
    monkeypatch.chdir(tmp_path)
    uri = uri.format(d=tmp_path)
    engine = sqlalchemy.create_engine(uri)
    with engine.connect() as connection:
        connection.exec_driver_sql("create table t (x int)")
        connection.commit()
    engine.dispose()
    made = [p.name for p in tmp_path.iterdir()]
    assert len(made) == 1, made
    assert name in (None, made[0])  # a%20b.db: 'a b.db' under SQLAlchemy 2.1, as written under 2.0
    assert os.path.join(tmp_path, sqlite_file(uri)) == str(tmp_path / made[0])


@pytest.mark.parametrize("uri, file", [
    ("sqlite:///x.db?mode=memory&uri=true", "x.db?mode=memory"),  # a plain name to SQLite
    ("sqlite:///file:x.db?mode=memory&uri=true", ":memory:"), ("sqlite:///:memory:", ":memory:"),
    ("http://h/sqlite:///m.db", None), ("postgresql://h/db?x=1", None)])
def test_what_is_no_sqlite_file(uri, file):
    assert sqlite_file(uri) == file


@pytest.mark.parametrize("uri, words, error", [
    ("sqlite:///file:{d}/m.db?mode=ro&uri=true", "read-only", "readonly"),
    ("sqlite:///file:{d}/new.db?mode=rw&uri=true", "does not create", "unable to open")])
def test_a_sqlite_store_that_cannot_take_points_is_refused(uri, words, error, tmp_path):
    import sqlalchemy
    sqlalchemy.create_engine(f"sqlite:///{tmp_path}/m.db").connect().close()  # an empty store
    uri = uri.format(d=tmp_path)
    assert words in (uri_problem(uri, {}) or ""), uri_problem(uri, {})
    with pytest.raises(sqlalchemy.exc.OperationalError, match=error):  # as SQLAlchemy finds it
        with sqlalchemy.create_engine(uri).connect() as connection:
            connection.exec_driver_sql("create table t (x int)")


@pytest.mark.slow
def test_a_sqlite_uri_with_options_tracks_into_its_file_and_nothing_beside_it(tracking_env,
                                                                             tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    uri = f"sqlite:///{store}/m.db?timeout=30"
    tracking_env.setenv("MLFLOW_TRACKING_URI", uri)
    result = launch([sys.executable, "-c", "from platform_plugin import tracking\n"
                     "tracking.get_tracker().log_metric('loss', 0.5, step=1)"], nproc=1,
                    cwd=str(tmp_path), no_system_metrics=True, write=lambda text: None)
    assert result.ok and result.tracking.pending == 0, result.tracking
    assert not [p.name for p in store.iterdir() if "?" in p.name]  # old: m.db?timeout=30(.lock)
    runs = client(f"sqlite:///{store}/m.db").search_runs(
        [e.experiment_id for e in client(f"sqlite:///{store}/m.db").search_experiments()])
    assert [m.value for r in runs for m in
            client(uri).get_metric_history(r.info.run_id, "loss")] == [0.5]
