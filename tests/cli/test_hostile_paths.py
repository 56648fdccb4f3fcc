"""What a hostile file system hands the commands: links that loop, a `.env` that is a FIFO, a
device or a dangling link, state files that are FIFOs. Each is a refusal with a code (exit 2,
nothing created, no traceback) or is read without blocking; before, each was a traceback, a
silent skip or a hang (named in each test)."""
from __future__ import annotations

import json
import os

import pytest

from tests.cli.helpers import run_inprocess, run_subprocess
from tests.cli.test_refusals import refused


@pytest.fixture
def cwd(tmp_path, clean_environ):
    clean_environ.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    os.symlink("loop", tmp_path / "loop")  # a link to itself
    return tmp_path


@pytest.mark.parametrize("argv, code", [
    (["debug", "loop", "--dry-run"], "NB_INVALID"),
    (["debug", "nb.ipynb", "--cwd", "loop", "--dry-run"], "NB_CWD"),
    (["full", "nb.ipynb", "--output", "loop", "--dry-run", "--no-cleanup"], "NB_OUTPUT"),
    (["debug", "nb.ipynb", "--output", "loop/out.ipynb", "--dry-run"], "NB_OUTPUT"),
    (["sync", "--log-dir", "loop"], "TRACKING_JOB"),
    (["compare", "--log-dir", "loop"], "TRACKING_JOB"),
    (["server", "--port", "0", "--data-dir", "loop"], "SERVER_DATA_DIR"),
    (["server", "--port", "0", "--data-dir", "loop/server"], "SERVER_DATA_DIR"),
])
def test_a_symlink_loop_is_refused_not_a_traceback(cwd, argv, code):
    """Before: `RuntimeError: Symlink loop from '.../loop'` out of Path.resolve()."""
    outcome = run_inprocess(argv, cwd)
    refused(outcome, code)
    assert "back to itself (a loop)" in outcome.text


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir])
def test_a_notebook_that_is_a_fifo_or_folder_is_named_as_such(cwd, make):
    """Before: `[NB_MISSING] notebook .../x.ipynb not found` for a path that is there."""
    make(cwd / "x.ipynb")
    outcome = run_inprocess(["debug", "x.ipynb", "--dry-run"], cwd)
    refused(outcome, "NB_INVALID")
    assert "is not a file" in outcome.text


def _fifo(path):
    os.mkfifo(path)


@pytest.mark.parametrize("make, code", [
    (_fifo, "ENV_FILE_NOT_REGULAR"),
    (lambda p: os.symlink("/dev/zero", p), "ENV_FILE_NOT_REGULAR"),
    (lambda p: os.symlink("no-such-file", p), "ENV_FILE_UNREADABLE"),
    (lambda p: os.symlink(".env", p), "ENV_FILE_UNREADABLE"),
])
def test_a_dot_env_that_is_there_but_no_file_is_refused_not_skipped(cwd, make, code):
    """Before: `os.path.isfile` said no and the .env was skipped in silence - every rank and
    kernel ran without the user's settings, `platform-run env` showed none of them."""
    make(cwd / ".env")
    for argv in (["env"], ["launch", "--nproc", "1", "--tracking", "none", "--", "true"],
                 ["debug", "nb.ipynb", "--dry-run"]):
        refused(run_inprocess(argv, cwd), code)
    explicit = run_inprocess(["env", "--env-file", ".env"], cwd)
    refused(explicit, code)


def test_a_dot_env_folder_is_a_virtualenv_and_is_ignored(cwd):
    """`python -m venv .env` is common: a folder named .env is not the settings file."""
    (cwd / ".env" / "bin").mkdir(parents=True)
    shown = run_inprocess(["env"], cwd)
    assert shown.rc == 0 and not shown.traceback, shown
    refused(run_inprocess(["env", "--env-file", ".env"], cwd), "ENV_FILE_NOT_REGULAR")


def test_clean_never_blocks_on_a_fifo_env_or_state_file(cwd):
    """Before: `platform-run clean` (and a full run's cleanup) opened CODE/.env and a job's
    tracking/sink.json with open(), which waits for a writer forever on a FIFO: a hang."""
    code = cwd / "CODE"
    spool = code / "platform_logs" / "job-1" / "tracking"
    spool.mkdir(parents=True)
    (code / "train.py").write_text("print(1)\n")
    os.mkfifo(code / ".env")
    os.mkfifo(spool / "sink.json")
    (spool / "rank_0.jsonl").write_text("")
    cleaned = run_subprocess(["clean", "--root", str(code)], cwd)
    assert cleaned.rc == 0 and not cleaned.traceback, cleaned
    assert "could not be read" in cleaned.text  # the unreadable spool is kept, and said so
    assert (spool / "sink.json").exists()


def test_sync_never_blocks_on_a_fifo_state_file(cwd):
    """Before: `platform-run sync` hung on a FIFO in place of a stream's offset file."""
    spool = cwd / "job-1" / "tracking"
    spool.mkdir(parents=True)
    (spool / "sink.json").write_text(json.dumps(
        {"sink": "mlflow", "tracking_uri": f"sqlite:///{cwd}/x.db", "ended": False}))
    (spool / "rank_0.jsonl").write_text('{"k": "m", "n": "loss", "v": 1, "s": 0, "t": 1}\n')
    os.mkfifo(spool / "rank_0.state.json")
    synced = run_subprocess(["sync", "job-1", "--log-dir", str(cwd), "--wait", "0"], cwd)
    refused(synced, "TRACKING_STATE_DAMAGED")
    assert "not a regular file" in synced.text


def test_compare_of_a_job_whose_store_is_gone_creates_no_store(cwd):
    """A project moved to another folder: its job's sink.json names a sqlite store that is not
    there. Before: compare opened it, which made the folders and an empty mlflow.db there, then
    said 'no rank logged loss; its metrics: none'."""
    spool = cwd / "platform_logs" / "job-1" / "tracking"
    spool.mkdir(parents=True)
    (spool / "sink.json").write_text(json.dumps(
        {"sink": "mlflow", "tracking_uri": f"sqlite:///{cwd}/moved/mlflow.db", "ended": True}))
    outcome = run_inprocess(["compare", "job-1"], cwd)
    refused(outcome, "TRACKING_JOB")
    assert "does not exist" in outcome.text and not (cwd / "moved").exists()


@pytest.mark.parametrize("make, force", [
    (os.mkfifo, True), (os.mkdir, True),
    (lambda p: os.symlink(str(p) + "-elsewhere", p), False)])  # a dangling link
def test_init_refuses_a_template_place_that_is_no_file_before_writing_anything(cwd, make, force):
    """Before: `init --force` with a FIFO or folder named platform.toml was a SpecialFileError /
    IsADirectoryError traceback, and a dangling link was written through
    (the template landed at the link's target, outside the project)."""
    project = cwd / "proj"
    project.mkdir()
    make(project / "platform.toml")
    outcome = run_inprocess(["init", str(project), *(["--force"] if force else [])], cwd)
    refused(outcome, "INIT_FILE_NOT_REGULAR")
    assert sorted(os.listdir(project)) == ["platform.toml"]  # nothing written
    assert not os.path.lexists(str(project / "platform.toml") + "-elsewhere")
