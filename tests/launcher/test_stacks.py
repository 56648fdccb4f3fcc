"""Hang diagnosis: a job stopped for silence shows where every rank was stuck (py-spy, taken
before the ranks are stopped) in the result table, the rank logs and the child runs."""
from __future__ import annotations

import sys

import pytest

from platform_plugin.launcher import launch
from platform_plugin.launcher.display.result_table import render_result
from platform_plugin.launcher.processes.stacks import main_thread_frames
from tests.tracking.conftest import tracking_env  # noqa: F401 - the tracking tests' fixture
from tests.tracking.helpers import child_runs, client

HUNG = """
import os, time

def fake_allreduce():      # rank 0: waits in a collective that never completes
    time.sleep(600)

def load_batch():          # rank 1: waits for data that never comes
    time.sleep(600)

if os.environ["RANK_ID"] == "0":
    fake_allreduce()
else:
    load_batch()
"""

DUMP = '''Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4243 (idle): "pin_memory"
    wait (threading.py:327)
Thread 4242 (idle): "MainThread"
    fake_allreduce (train.py:5)
    <module> (train.py:11)
'''


def test_the_main_thread_is_picked_among_the_threads_py_spy_prints():
    assert main_thread_frames(DUMP, 4242) == ["fake_allreduce (train.py:5)", "<module> (train.py:11)"]
    assert main_thread_frames("Thread 7 (idle)\n    f (a.py:1)\n", 99) == ["f (a.py:1)"]
    assert main_thread_frames("no threads here", 1) == []


@pytest.mark.slow
def test_a_hung_job_shows_each_ranks_innermost_frame_and_keeps_the_dumps(tracking_env, tmp_path):
    (tmp_path / "hung.py").write_text(HUNG)
    result = launch([sys.executable, "hung.py"], nproc=2, cwd=str(tmp_path), silence_timeout=2,
                    grace=1, check=False, no_system_metrics=True, write=lambda text: None)
    assert result.status == "hung" and result.tracking.wait_ended()
    by_rank = {f.name: f for f in result.failures}
    assert by_rank["0"].stack[0].startswith("fake_allreduce (hung.py:")
    assert by_rank["1"].stack[0].startswith("load_batch (hung.py:")
    table = render_result(result)
    assert "stuck in (innermost frames; every frame in the job's stacks/):" in table
    row0 = next(line for line in table.splitlines() if line.strip().startswith("rank 0: "))
    assert "fake_allreduce (hung.py:" in row0 and "<module> (hung.py:" in row0
    for rank, frame in (("0", "fake_allreduce"), ("1", "load_batch")):
        log = (tmp_path / "platform_logs" / result.job_id / f"rank_{rank}.log").read_text()
        assert "Python stack of pid" in log and frame in log
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for rank, run in enumerate(child_runs(c, result.tracking.parent_run_id)):
        assert [a.path for a in c.list_artifacts(run.info.run_id, "stacks")] == [f"stacks/rank_{rank}.txt"]
        assert run.info.status == "FAILED"


def test_py_spy_under_a_kernels_colour_variables_gives_plain_frames(monkeypatch):
    """A Jupyter kernel sets CLICOLOR_FORCE for its subprocesses, and py-spy colours into a pipe
    then: every interrupted %dist_run job showed `(no frames)` (seen in JupyterLab)."""
    import subprocess

    from platform_plugin.launcher.processes.stacks import dump_one, py_spy
    monkeypatch.setenv("CLICOLOR_FORCE", "1")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time\ndef nap():\n    time.sleep(60)"
                                "\nprint('up', flush=True)\nnap()"], stdout=subprocess.PIPE)
    try:
        assert sleeper.stdout.readline() == b"up\n"
        dump = dump_one(sleeper.pid, py_spy(), timeout=10)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "\x1b" not in dump.text, dump.text
    assert dump.frames and dump.frames[0].startswith("nap (<string>:"), dump


def test_the_table_skips_importlibs_frozen_frames():
    """A rank interrupted while MindSpore imports (seen in JupyterLab): the frames of files."""
    from platform_plugin.launcher.processes.result import JobResult, JobStatus, RankFailure
    stack = ["_call_with_frames_removed (<frozen importlib._bootstrap>:241)",
             "ExtensionFileLoader.create_module (<frozen importlib._bootstrap_external>:1233)",
             "<module> (mindspore/graph/api.py:138)", "<module> (ms.py:1)"]
    frozen = ["exec_module (<frozen importlib._bootstrap_external>:940)"]
    failures = [RankFailure("0", 0, 0, "h", 42, None, "SIGTERM", 3.0, stopped_by_launcher=True,
                            stack=stack),
                RankFailure("1", 1, 1, "h", 43, None, "SIGTERM", 3.0, stopped_by_launcher=True,
                            stack=frozen)]
    table = render_result(JobResult("j", "n", "/logs/j", "plain", JobStatus.INTERRUPTED, False,
                                    3.0, {"0": -15, "1": -15}, failures=failures))
    row0 = next(line for line in table.splitlines() if line.strip().startswith("rank 0: "))
    assert row0.rstrip().endswith("<module> (mindspore/graph/api.py:138) < <module> (ms.py:1)")
    assert "frozen" not in row0
    row1 = next(line for line in table.splitlines() if line.strip().startswith("rank 1: "))
    assert row1.rstrip().endswith(frozen[0])  # nothing else known: better than nothing


def test_128_ranks_scattered_over_two_places_keep_their_frames_on_the_line():
    """Every other rank of 128 in one place: its label "ranks 0, 2, 4, ..., 126" was ~250
    columns, and it padded every place's line to that width (at 80 columns each line showed
    the label and 20 characters of frames). Now the count and the first ranks."""
    from platform_plugin.launcher.processes.result import JobResult, JobStatus, RankFailure
    places = (["allreduce (train.py:10)", "step (train.py:20)"],
              ["load_batch (data.py:5)", "next_batch (train.py:30)"])
    failures = [RankFailure(str(i), i, i % 8, "h", 100 + i, None, "SIGTERM", 3.0,
                            stopped_by_launcher=True, stack=places[i % 2]) for i in range(128)]
    failures.append(RankFailure("sched", None, None, "h", 99, None, "SIGTERM", 3.0,
                                stopped_by_launcher=True, stack=["wait (sched.py:1)"]))
    codes = {f.name: -15 for f in failures}
    table = render_result(JobResult("j", "n", "/logs/j", "plain", JobStatus.TIMEOUT, False, 3.0,
                                    codes, failures=failures), 80)
    lines = table.splitlines()
    stuck = lines[lines.index("  where the ranks were (innermost frames; every frame in the job's "
                              "stacks/):")
                  + 1:][:3]
    assert [line.split(":")[0].strip() for line in stuck] == [
        "64 ranks 0, 2, 4, 6, 8, 10, …", "64 ranks 1, 3, 5, 7, 9, 11, …", "sched"], stuck
    assert all(len(line) <= 80 for line in stuck), stuck
    assert stuck[0].endswith(": allreduce (train.py:10) < step (train.py:20)"), stuck
    assert ": load_batch (data.py:5) < next_batch" in stuck[1], stuck
    assert stuck[2].split() == ["sched:", "wait", "(sched.py:1)"], stuck
