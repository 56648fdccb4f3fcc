"""Doctor: process checks on real processes started with crafted env, last-job records, rows."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.ranktable.samples import TABLE_4P, rank_processes, sample, write_json
from platform_plugin.doctor import checks as doctor
from platform_plugin.doctor.processes import find_rank_processes, last_job_rows, rank_process_rows


def _table(tmp_path):
    # a table file of our own: the doctor groups ranks by RANK_TABLE_FILE, so other test runs'
    # ranks on this machine never mix with ours
    return os.path.realpath(write_json(tmp_path / "t.json", sample(TABLE_4P)))


def test_different_programs_with_one_rank_id_are_duplicates(tmp_path):
    table = _table(tmp_path)
    base = {"RANK_TABLE_FILE": table, "RANK_START": "0"}
    other = [sys.executable, "-c", "import time; time.sleep(120)  # sleep other"]
    with rank_processes([{**base, "RANK_ID": "1", "DEVICE_ID": "5"}]) as first, \
            rank_processes([{**base, "RANK_ID": "1", "DEVICE_ID": "6"}], argv=other) as second:
        rows = rank_process_rows(table)
        pids = {first[0].pid, second[0].pid}
    fails = [r for r in rows if r[0] == "FAIL"]
    dup = [r for r in fails if "RANK_ID=1 is used by 2 processes" in r[2]]
    assert dup and all(str(pid) in dup[0][2] for pid in pids)
    assert any("missing rank(s) 0, 2, 3" in r[2] for r in fails)
    assert not any("NPU" in r[2] for r in fails)  # devices 5 and 6 differ


def test_a_complete_job_is_ok_and_workers_are_folded_into_their_rank(tmp_path):
    table = _table(tmp_path)
    spawner = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable,"
               " '-c', 'import time; time.sleep(120)']); time.sleep(120)  # sleep"]
    envs = [{"RANK_TABLE_FILE": table, "RANK_START": "0", "RANK_ID": str(r),
             "DEVICE_ID": str(4 + r)} for r in range(4)]
    with rank_processes(envs, argv=spawner):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_carrying(table)) < 8:
            time.sleep(0.05)  # each rank starts its worker
        carrying = _carrying(table)
        mine = [p for p in find_rank_processes() if p.rank_table == table]
        rows = rank_process_rows(table)
    assert len(carrying) == 8
    assert len(mine) == 4  # 8 processes carry RANK_ID, 4 are ranks
    assert rows == [("OK", "running ranks", "4 rank process(es), no duplicates", "")]


def _carrying(table: str) -> list[int]:
    """Pids whose environment names our table (ranks and their workers)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and f"RANK_TABLE_FILE={table}".encode() in open(
                    f"/proc/{entry}/environ", "rb").read().split(b"\0"):
                pids.append(int(entry))
        except OSError:
            pass
    return pids


def test_no_rank_processes_for_an_unused_table(tmp_path):
    assert rank_process_rows(str(tmp_path / "nobody.json"))[0][0] == "OK"


def _job(tmp_path, name, data):
    folder = tmp_path / "logs" / name
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps(data))
    return folder


def test_last_job_running_with_a_dead_rank_fails(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _job(tmp_path, "train-1", {"state": "running", "supervisor_pid": os.getpid(),
                               "plan": {"job_id": "train-1"},
                               "pids": {"0": os.getpid(), "1": gone.pid}})
    (row,) = last_job_rows(str(tmp_path / "logs"))
    assert row[0] == "FAIL" and "rank(s) 1 already exited" in row[2] and "rank_1.log" in row[3]


def test_last_job_records(tmp_path):
    logs = str(tmp_path / "logs")
    assert last_job_rows(logs)[0][0] == "SKIP"
    folder = _job(tmp_path, "a", {"state": "ended", "plan": {"job_id": "a"},
                                  "result": {"ok": False, "status": "failed",
                                             "root_cause": {"name": "2", "exitcode": 1}}})
    assert last_job_rows(logs)[0][:3] == ("WARN", "last job", "job a failed: rank 2 exit 1")
    (folder / "job.json").write_text("{not json")
    assert last_job_rows(logs)[0][0] == "SKIP"
    (folder / "job.json").write_text(json.dumps({"state": "ended", "result": {"ok": True}}))
    assert last_job_rows(logs)[0][0] == "OK"


def test_checks_skip_what_this_machine_cannot_check(tmp_path):
    ctx = doctor.Context(environ={"PATH": "/usr/bin:/bin"}, cwd=str(tmp_path))
    rows = doctor.run_checks(ctx)
    by_check = {}
    for row in rows:
        by_check.setdefault(row.check, []).append(row.status)
    assert by_check["npu-smi"] == ["SKIP"] and by_check["rank table"] == ["SKIP"]
    assert by_check["variables"] == ["OK"]
    text = doctor.render(rows)
    assert "npu-smi not found" in text and text.splitlines()[-1].count("SKIP") == 1
