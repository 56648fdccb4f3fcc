"""job.json on a full disk: the result is written over the blocks the first write reserved
(launcher/processes/jobfile.py), compacted when it must, and stays valid JSON."""
from __future__ import annotations

import json

from platform_plugin.launcher.processes.jobfile import RESERVE, overwrite_in_place


def test_the_result_is_written_over_the_reserved_blocks(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"state": "running"}) + " " * RESERVE + "\n")
    data = {"state": "ended", "result": {"status": "failed", "failures": [
        {"name": "0", "last_lines": ["x" * 100] * 50}], "root_cause": None}}
    written, note = overwrite_in_place(str(path), data)
    assert written and "in place" in note
    assert json.loads(path.read_text()) == data
    assert path.stat().st_size == len(json.dumps({"state": "running"})) + RESERVE + 1


def test_a_result_larger_than_the_file_is_compacted_or_refused(tmp_path):
    path = tmp_path / "job.json"
    failures = [{"name": str(i), "last_lines": ["y" * 200] * 20} for i in range(4)]
    data = {"state": "ended", "result": {"status": "failed", "failures": failures,
                                         "root_cause": None}}
    path.write_text(" " * 600)  # room for the result without the ranks' last lines only
    written, _ = overwrite_in_place(str(path), data)
    got = json.loads(path.read_text())
    assert written and got["result"]["failures"][0]["last_lines"] == []
    path.write_text(" " * 10)
    assert overwrite_in_place(str(path), data) == (False, "")
    assert overwrite_in_place(str(tmp_path / "missing.json"), data) == (False, "")
