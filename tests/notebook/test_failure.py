"""Failure reports and the dry-run view: the root-cause table of a failed `%dist_run` cell
(read from the JobResult published as data, never from the printed text), and secrets kept
off the terminal."""
from __future__ import annotations

import dataclasses
import json

from platform_plugin.launcher.display.result_table import render_result
from platform_plugin.launcher.processes.result import JOB_RESULT_MIME, JobResult, JobStatus, RankFailure
from platform_plugin.notebook.failure import CellFailure, FailureKind, job_result

CAUSE = RankFailure(name="1", rank_id=1, device_id=1, host="vm", pid=9, exitcode=3,
                    signal_name=None, runtime_s=1.0, last_lines=["data shard missing"],
                    root_cause=True)
RESULT = JobResult(job_id="train-1", job_name="train", job_dir="/tmp/platform_logs/train-1",
                   backend="plain", status=JobStatus.FAILED, ok=False, duration_s=2.0,
                   exitcodes={"0": -15, "1": 3}, failures=[CAUSE], root_cause=CAUSE)
MESSAGE = "job train-1 failed: rank 1 exit 3 (logs: /tmp/platform_logs/train-1)"


def stream(name, text):
    return {"output_type": "stream", "name": name, "text": text}


def published(result):
    return {"output_type": "display_data", "data": {JOB_RESULT_MIME: result.to_dict()},
            "metadata": {}}


def test_the_job_result_travels_as_data_and_round_trips():
    earlier = dataclasses.replace(RESULT, job_id="train-0", status=JobStatus.SUCCEEDED, ok=True,
                                  failures=[], root_cause=None)
    outputs = [published(earlier), stream("stdout", "job train-1 FAILED ... printed text\n"),
               published(RESULT)]
    got = job_result(outputs)
    assert got == RESULT and got.status is JobStatus.FAILED
    assert job_result([stream("stdout", render_result(RESULT))]) is None  # text is never parsed


def test_a_rank_failure_renders_the_launchers_table():
    failure = CellFailure(FailureKind.RANK, 2, 3, "%dist_run --nproc 2 python t.py", "JobFailed",
                          MESSAGE, (), RESULT)
    text = failure.render()
    assert "a rank failed in cell 3 (In [3])" in text and MESSAGE in text
    assert render_result(RESULT) in text and "ROOT CAUSE" in text and "data shard missing" in text
    without = CellFailure(FailureKind.RANK, 2, 3, "x", "JobFailed", MESSAGE).render()
    assert without.endswith(f"JobFailed: {MESSAGE}")


def test_statuses_keep_their_json_values():
    data = RESULT.to_dict()
    assert data["status"] == "failed" and json.loads(json.dumps(data))["status"] == "failed"
    assert f"{JobStatus.HUNG}" == "hung" and str(FailureKind.TIMEOUT) == "timeout"


def test_error_tracebacks_lose_their_colours_off_a_terminal():
    failure = CellFailure(FailureKind.ERROR, 0, 1, "1/0", "ZeroDivisionError", "division by zero",
                          ("\x1b[0;31mZeroDivisionError\x1b[0m: division by zero",))
    assert "\x1b" not in failure.render() and "\x1b" in failure.render(colors=True)


def test_dry_run_masks_secrets(tmp_path):
    """`--dry-run` shows the kernel's variables; secrets from .env must not reach the terminal."""
    from pathlib import Path

    from platform_plugin.cli.notebook import describe
    from platform_plugin.notebook.run import NotebookRun

    run = NotebookRun("debug", Path("nb.ipynb"), Path("out.ipynb"), tmp_path, "python3", "/k",
                      {"platform_mode": "debug"},
                      {"MLFLOW_TRACKING_PASSWORD": "hunter2", "HF_TOKEN": "abc",
                       "MLFLOW_TRACKING_URI": "https://alice:pw@mlflow.example/x",
                       "PLATFORM_RUN_MODE": "debug"}, None, None)
    text = describe(run)
    assert "hunter2" not in text and "abc" not in text and "alice" not in text
    assert "https://***@mlflow.example/x" in text and "PLATFORM_RUN_MODE=debug" in text
