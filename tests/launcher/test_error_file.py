"""TORCHELASTIC_ERROR_FILE: what torch's @record writes (made here by torch's own error
handler, not by hand) read into the root cause, and the failure table that shows it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from platform_plugin.launcher.display.result_table import render_result
from platform_plugin.launcher.processes.error_file import recorded_error
from platform_plugin.launcher.processes.result import JobResult, JobStatus, RankFailure

RECORDING = """
import os
from torch.distributed.elastic.multiprocessing.errors import record

def load(path):
    raise ValueError(f"no shard at {path}")

@record
def main():
    load("/data/shard-3")

main()
"""


@pytest.mark.slow  # (torch's import)
def test_the_exception_torchs_record_wrote_is_read_with_its_innermost_frame(tmp_path):
    path = tmp_path / "rank_1.attempt1.error.json"
    done = subprocess.run([sys.executable, "-c", RECORDING], capture_output=True, text=True,
                          env={"TORCHELASTIC_ERROR_FILE": str(path), "PATH": "/usr/bin:/bin"},
                          timeout=120)
    assert done.returncode == 1 and path.exists(), done.stderr
    message, frame = recorded_error(str(path))
    assert message == "ValueError: no shard at /data/shard-3"
    assert frame.startswith('File "<string>", line') and frame.endswith("in load")


def test_nothing_recorded_is_nothing_said(tmp_path):
    assert recorded_error(None) == [] and recorded_error(str(tmp_path / "absent.json")) == []
    for text in ("not json", "[]", '{"message": {"extraInfo": {}}}', '{"message": ""}'):
        (tmp_path / "e.json").write_text(text)
        assert recorded_error(str(tmp_path / "e.json")) == [], text
    (tmp_path / "e.json").write_text(json.dumps({"message": "torchrun's own: exit 1",
                                                 "timestamp": 1}))
    assert recorded_error(str(tmp_path / "e.json")) == ["torchrun's own: exit 1"]


def test_the_root_cause_block_shows_what_the_rank_recorded():
    cause = RankFailure(name="1", rank_id=1, device_id=1, host="h", pid=7, exitcode=1,
                        signal_name=None, runtime_s=2.0, last_lines=["Traceback ..."],
                        root_cause=True, recorded=["RuntimeError: boom", 'File "t.py", line 3, '
                                                   "in main"])
    result = JobResult(job_id="j", job_name="j", job_dir="/logs/j", backend="torch",
                       status=JobStatus.FAILED, ok=False, duration_s=2.0,
                       exitcodes={"1": 1}, failures=[cause], root_cause=cause)
    text = render_result(result)
    assert ("  recorded by the rank (TORCHELASTIC_ERROR_FILE): RuntimeError: boom\n"
            '    at File "t.py", line 3, in main\n') in text
    assert JobResult.from_dict(result.to_dict()).root_cause.recorded == cause.recorded
