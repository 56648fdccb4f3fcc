"""MLFLOW_TRACKING_URI values no MLflow client can use are refused before a job exists
(exit 2, TRACKING_URI, nothing created). Before: the job ran, the launcher waited out the 30 s
drain deadline, and the points waited in a spool whose sink.json named the same URI, so
`platform-run sync` could never deliver them."""
from __future__ import annotations

import os

import pytest

from platform_plugin.tracking.shared.uri_check import folder_store_refused, uri_problem
from tests.cli.helpers import run_inprocess
from tests.cli.test_refusals import refused


# MLflow 3.1 (the compat job's) still opens folder stores: there is nothing to refuse
FOLDER_STORE = pytest.mark.skipif(not folder_store_refused({}),
                                  reason="this MLflow opens folder stores (./mlruns)")


@pytest.fixture
def cwd(tmp_path, clean_environ):
    clean_environ.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))
    clean_environ.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    (tmp_path / "notes.txt").write_text("not a database " * 10)
    os.mkfifo(tmp_path / "pipe.db")
    return tmp_path


@pytest.mark.parametrize("uri, words", [
    ("localhost:5000", "no store of scheme 'localhost'"),
    ("ftp://host/store", "no store of scheme 'ftp'"),
    ("http://", "needs a host"),
    ("sqlite:///:memory:", "every process can open"),
    ("sqlite:///{cwd}/notes.txt", "not a SQLite database"),
    ("sqlite:///{cwd}/pipe.db", "is not a file"),  # opened without blocking
    pytest.param("mlruns", "no longer opens a folder store", marks=FOLDER_STORE),
    pytest.param("file:///{cwd}/mlruns", "no longer opens a folder store", marks=FOLDER_STORE),
])
def test_a_tracking_uri_that_cannot_work_refuses_the_launch_before_the_job_exists(cwd, uri,
                                                                                   words,
                                                                                   clean_environ):
    clean_environ.setenv("MLFLOW_TRACKING_URI", uri.format(cwd=cwd))
    outcome = run_inprocess(["launch", "--nproc", "1", "--", "true"], cwd)
    refused(outcome, "TRACKING_URI")  # and nothing created: no platform_logs/, no store
    assert words in outcome.text


@pytest.mark.parametrize("variable, value, code", [
    ("PLATFORM_TRACKING", "bogus", "TRACKING_CHOICE"),
    ("PLATFORM_TRACKING_LAYOUT", "bogus", "TRACKING_LAYOUT")])
def test_a_bad_tracking_choice_creates_no_job_folder(cwd, clean_environ, variable, value, code):
    """Before: refused after platform_logs/<job>/.launcher-localhost.lock was made."""
    clean_environ.setenv(variable, value)
    refused(run_inprocess(["launch", "--nproc", "1", "--", "true"], cwd), code)


def test_uris_that_work_or_may_work_later_pass(tmp_path):
    for uri in ("http://127.0.0.1:1", "https://mlflow.example/prefix", f"sqlite:///{tmp_path}/new.db",
                "postgresql+psycopg2://u@127.0.0.1:1/db", "databricks"):
        assert uri_problem(uri, {}) is None, uri
    assert uri_problem("mlruns", {"MLFLOW_ALLOW_FILE_STORE": "true"}) is None
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")  # sqlite opens an empty file as an empty database
    assert uri_problem(f"sqlite:///{empty}", {}) is None


@pytest.mark.parametrize("store, code", [
    pytest.param("mlruns", "UI_STORE", marks=FOLDER_STORE), ("sqlite:///{cwd}/notes.txt", "UI_STORE"),
    ("sqlite:///:memory:", "UI_STORE")])
def test_ui_refuses_a_store_mlflow_will_not_open(cwd, store, code):
    """Before: `ui --store mlruns` started MLflow, waited for it and printed its
    MlflowException traceback (the folder store's refusal) from the server log, exit 1."""
    refused(run_inprocess(["ui", "--port", "0", "--store", store.format(cwd=cwd)], cwd), code)


def test_wflogger_asked_for_without_its_sdk_refuses_the_launch(cwd, clean_environ):
    """Before: the job ran, the launcher waited out the 30 s drain, every point stayed in the
    spool ('wflogger SDK not importable'). The SDK is the platform's: not installed here."""
    for argv, env in ((["--tracking", "wflogger"], None), ([], "wflogger")):
        if env:
            clean_environ.setenv("PLATFORM_TRACKING", env)
        outcome = run_inprocess(["launch", "--nproc", "1", *argv, "--", "true"], cwd)
        refused(outcome, "TRACKING_SINK")
        assert "wf_analyse" in outcome.text
