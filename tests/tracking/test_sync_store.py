"""Which store `platform-run sync` sends to. A job whose sqlite store was moved or deleted is
refused (TRACKING_STORE_GONE) instead of sending its rest into a fresh empty store at the old
path (MLflow makes a sqlite store by opening it); `--to URI` names the store where it is now
(recorded: a second sync sends nothing twice), or a store for a job whose URI never worked; a
`--to` into a store without the job's runs after part of the job went elsewhere is refused."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from platform_plugin.launcher import launch
from platform_plugin.tracking.rank.spool import SpoolWriter, encode_metric
from platform_plugin.tracking.shared.uri_check import uri_problem
from platform_plugin.tracking.shared.state import HelperStatus, SinkConfig
from platform_plugin.util.procfs import alive
from tests.cli.helpers import run_inprocess
from tests.helpers import wait_for
from tests.tracking.helpers import client, hold_port

pytestmark = pytest.mark.slow
CLI = str(Path(sys.executable).with_name("platform-run"))
RANK = ("from platform_plugin import tracking\n"
        "tracking.get_tracker().log_metric('loss', 0.5, step=1)")


def sync(*args: str, process: bool = False) -> subprocess.CompletedProcess:
    """In this process (MLflow imported once: each `sync` process imports it again, 2-7 s
    here) unless `process`."""
    argv = ["sync", *args, "--wait", "0"]
    if process:
        return subprocess.run([CLI, *argv], capture_output=True, text=True, timeout=180)
    outcome = run_inprocess(argv, Path.cwd())
    assert not outcome.traceback, outcome.traceback
    return subprocess.CompletedProcess(argv, outcome.rc, outcome.out, outcome.err)


def losses(uri: str) -> list[float]:
    mlflow = client(uri)
    runs = mlflow.search_runs([e.experiment_id for e in mlflow.search_experiments()])
    return [m.value for r in runs for m in mlflow.get_metric_history(r.info.run_id, "loss")]


def helper_ended(job_dir: Path) -> None:
    """The job's helper may outlive launch() by seconds (ending runs, a loaded machine), and
    --to refuses to move a job under a helper still sending."""
    helper = HelperStatus.load(job_dir / "tracking")
    if helper is not None:
        wait_for(lambda: not alive(helper.pid), timeout=120, what="the helper to end")


def sink_uri(job_dir: Path) -> str:
    return json.loads((job_dir / "tracking" / "sink.json").read_text())["tracking_uri"]


def test_a_moved_store_is_refused_then_named_with_to_and_never_sent_twice(tracking_env, tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    tracking_env.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{old}/m.db")
    result = launch([sys.executable, "-c", RANK], nproc=1, cwd=str(tmp_path),
                    no_system_metrics=True, write=lambda text: None)
    assert result.ok and result.tracking.pending == 0, result.tracking
    job_dir = Path(result.job_dir)
    helper_ended(job_dir)
    shutil.move(str(old), str(new))  # the user moves the project's store
    # a point the job's helper did not deliver (the rank side's own writer)
    writer = SpoolWriter(job_dir / "tracking" / "rank_0.jsonl")
    writer.append(encode_metric('"loss"', 0.7, 2, 1_700_000_000_000))
    writer.close()

    gone = sync(result.job_id, process=True)
    assert gone.returncode == 2 and "[TRACKING_STORE_GONE]" in gone.stderr, gone
    assert "--to sqlite:///" in gone.stderr and "Traceback" not in gone.stderr
    assert not (old / "m.db").exists()  # old code: a fresh store made there, exit 0

    elsewhere = tmp_path / "other.db"  # a store that never held the job
    split = sync(result.job_id, "--to", f"sqlite:///{elsewhere}")
    assert split.returncode == 2 and "[TRACKING_SYNC_TO]" in split.stderr, split
    assert not elsewhere.exists() and sink_uri(job_dir) == f"sqlite:///{old}/m.db"

    moved = sync(result.job_id, "--to", f"sqlite:///{new}/m.db")
    assert moved.returncode == 0 and "sent 1 now" in moved.stdout, moved
    assert sink_uri(job_dir) == f"sqlite:///{new}/m.db"  # recorded for the next sync
    again = sync(result.job_id)
    assert again.returncode == 0 and "sent 0 now" in again.stdout, again
    assert sorted(losses(f"sqlite:///{new}/m.db")) == [0.5, 0.7]  # one run, each point once
    assert not (old / "m.db").exists()

    # the whole job again into a store without it (as after losing one): not into one with it
    twice = sync(result.job_id, "--to", f"sqlite:///{new}/m.db", "--from-start")
    assert twice.returncode == 2 and "[TRACKING_SYNC_TO]" in twice.stderr, twice
    rebuilt = sync(result.job_id, "--to", f"sqlite:///{elsewhere}", "--from-start")
    assert rebuilt.returncode == 0 and "sent 2 now" in rebuilt.stdout, rebuilt
    assert "runs ended" in rebuilt.stdout
    assert sync(result.job_id).stdout.count("sent 0 now") == 1
    assert sorted(losses(f"sqlite:///{elsewhere}")) == [0.5, 0.7]
    assert sorted(losses(f"sqlite:///{new}/m.db")) == [0.5, 0.7]  # left as it was

    # another store where that one was (removed, made anew): not the job's. In processes of
    # their own: MLflow keeps a store per URI open in this one (still on the removed file)
    elsewhere.unlink()
    shutil.copy(new / "m.db", elsewhere)  # a real MLflow store without the job's new runs
    writer = SpoolWriter(job_dir / "tracking" / "rank_0.jsonl")
    writer.append(encode_metric('"loss"', 0.8, 3, 1_700_000_000_000))
    writer.close()
    replaced = sync(result.job_id, process=True)
    assert replaced.returncode == 2 and "does not hold this job's runs" in replaced.stderr, replaced
    again = sync(result.job_id, "--to", f"sqlite:///{elsewhere}", "--from-start", process=True)
    assert again.returncode == 0 and "sent 3 now" in again.stdout, again
    with sqlite3.connect(elsewhere) as db:  # the old runs' 2 and the new ones' 3
        assert sorted(v for v, in db.execute("select value from metrics where key='loss'")) == \
            [0.5, 0.5, 0.7, 0.7, 0.8]


def test_a_job_whose_uri_never_worked_is_sent_to_another_store(tracking_env, tmp_path):
    port = hold_port()  # nobody listens: the recorded server never answered
    try:
        tracking_env.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port.getsockname()[1]}")
        tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "1")
        result = launch([sys.executable, "-c", RANK], nproc=1, cwd=str(tmp_path),
                        no_system_metrics=True, write=lambda text: None)
    finally:
        port.close()
    assert result.ok and result.tracking.pending == 1, result.tracking
    helper_ended(Path(result.job_dir))  # still retrying the dead server
    bad = sync(result.job_id, "--to", "localhost:5000")
    assert bad.returncode == 2 and "[TRACKING_URI]" in bad.stderr, bad
    store = f"sqlite:///{tmp_path}/later.db"
    moved = sync(result.job_id, "--to", store)
    assert moved.returncode == 0 and "sent 1 now" in moved.stdout and "runs ended" in moved.stdout, moved
    assert sync(result.job_id).stdout.count("sent 0 now") == 1
    assert losses(store) == [0.5]
    mlflow = client(store)
    runs = mlflow.search_runs([e.experiment_id for e in mlflow.search_experiments()])
    assert sorted(r.data.tags.get("mlflow.parentRunId") is None for r in runs) == [False, True]
    assert {r.info.status for r in runs} == {"FINISHED"}


def test_a_killed_helpers_pid_does_not_block_to(tracking_env, tmp_path):
    """helper.json of a helper killed mid-delivery (phase left 'forwarding'): its pid may name
    another process by now (here: this one) - that is no helper still sending."""
    spool = tmp_path / "platform_logs" / "job-20260101-000000-abcd" / "tracking"
    spool.mkdir(parents=True)
    SinkConfig("mlflow", tracking_uri="http://127.0.0.1:1", experiment_name="e").save(spool)
    HelperStatus(pid=os.getpid(), phase="forwarding").save(spool)
    moved = sync(str(spool.parent), "--to", f"sqlite:///{tmp_path}/m.db")
    assert moved.returncode == 0, moved  # before: TRACKING_SYNC_TO naming this pytest's pid
    assert sink_uri(spool.parent) == f"sqlite:///{tmp_path}/m.db"


def test_a_job_recorded_with_a_uri_no_client_can_use_is_told_to_use_to(tracking_env, tmp_path):
    """A job recorded before the URI check (or whose driver was uninstalled since): sync and
    compare said nothing useful (compare: a ModuleNotFoundError traceback; sync: the same error
    per attempt, for ever). Now TRACKING_URI pointing at --to, which then delivers."""
    job = tmp_path / "platform_logs" / "job-20260101-000000-abcd"
    (job / "tracking").mkdir(parents=True)
    uri = next(u for u in ("postgresql://u:p@127.0.0.1:1/db", "mysql://u@127.0.0.1:1/db")
               if uri_problem(u, {}))  # a driver SQLAlchemy cannot load here
    SinkConfig("mlflow", tracking_uri=uri, experiment_name="e").save(job / "tracking")
    writer = SpoolWriter(job / "tracking" / "rank_0.jsonl")
    writer.append(encode_metric('"loss"', 0.5, 1, 1_700_000_000_000))
    writer.close()
    for argv in (["sync", str(job), "--wait", "0"], ["compare", str(job)]):
        outcome = run_inprocess(argv, tmp_path)
        assert outcome.rc == 2 and "[TRACKING_URI]" in outcome.err, outcome
        assert not outcome.traceback
    assert "--to URI" in run_inprocess(["sync", str(job)], tmp_path).err
    moved = sync(str(job), "--to", f"sqlite:///{tmp_path}/m.db")
    assert moved.returncode == 0 and "sent 1 now" in moved.stdout, moved
    assert losses(f"sqlite:///{tmp_path}/m.db") == [0.5]
