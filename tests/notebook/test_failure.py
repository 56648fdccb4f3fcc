"""Failure reports and the dry-run view: the root-cause table of a failed `%dist_run`
cell, and secrets kept off the terminal."""
from __future__ import annotations

from platform_plugin.notebook.failure import rank_table

TABLE = ("job train-1 FAILED after 2.0s (backend plain, 2 processes)\n"
         "  root cause: rank 1 (device 1, host vm, pid 9) exit 3 after 1.0s\n"
         "  process  rank  device  pid  ended   runtime  note\n"
         "  rank 1   1     1       9    exit 3  1.0s     ROOT CAUSE\n"
         "  logs: /tmp/platform_logs/train-1")
MESSAGE = "job train-1 failed: rank 1 exit 3 (logs: /tmp/platform_logs/train-1)"


def stream(name, text):
    return {"output_type": "stream", "name": name, "text": text}


def test_table_is_cut_from_the_stream_the_launcher_printed_it_to():
    outputs = [stream("stdout", "[rank 0] step 1\njob train-0 FAILED earlier run\n  logs: x\n"),
               stream("stderr", "[rank 1] boom\n"),
               stream("stdout", TABLE + "\nafter the table\n")]
    assert rank_table(MESSAGE, outputs) == TABLE


def test_message_that_carries_the_table_is_used_as_is():
    assert rank_table(TABLE, []) == TABLE


def test_falls_back_to_the_message():
    assert rank_table(MESSAGE, [stream("stdout", "no table here\n")]) == MESSAGE
    assert rank_table("something else", []) == "something else"


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
