"""A job read from its folder by another process (launcher/jobs/records.py, follow.py): its state
from the launcher's pid AND start time, the ids a command may name, logs read from their end and
then incrementally, and folders that are half-written or gone."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from platform_plugin.errors import ConfigError
from platform_plugin.launcher.display.board_render import render_html, render_text
from platform_plugin.launcher.jobs.follow import COUNT_LIMIT, FIRST_READ, JobFollower, LogTail
from platform_plugin.launcher.jobs.records import list_jobs, read_record, resolve
from platform_plugin.util.procfs import start_ticks


def job_json(folder, *, pid: int, ticks: int | None, state: str = "running", result=None,
             started: float = 1.0):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.json").write_text(json.dumps({
        "state": state, "started_epoch": started, "result": result,
        "plan": {"job_id": folder.name, "job_name": "t", "backend": "plain", "nnodes": 1,
                 "ranks": [{"name": "0", "role": "worker"}, {"name": "1", "role": "worker"}]},
        "pids": {}, "launcher": {"pid": pid, "start_ticks": ticks, "uid": os.getuid(),
                                 "host": os.uname().nodename}}))
    return str(folder)


def test_a_job_is_running_while_its_launcher_lives_and_lost_once_it_is_gone(tmp_path):
    me = os.getpid()
    assert read_record(job_json(tmp_path / "a", pid=me, ticks=start_ticks(me))).state == "running"
    # the same pid started at another time is another process: the launcher is gone
    assert read_record(job_json(tmp_path / "b", pid=me, ticks=start_ticks(me) - 1)).state == "lost"
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert read_record(job_json(tmp_path / "c", pid=dead.pid, ticks=1)).state == "lost"
    ended = job_json(tmp_path / "d", pid=dead.pid, ticks=1, state="ended",
                     result={"status": "timeout", "exitcodes": {}})
    assert read_record(ended).state == "failed"  # a timeout is a failure
    stopped = job_json(tmp_path / "e", pid=dead.pid, ticks=1, state="ended",
                       result={"status": "interrupted"})
    assert read_record(stopped).state == "interrupted"


def test_ids_resolve_exactly_by_start_or_inside_else_one_line_naming_candidates(tmp_path):
    for i, name in enumerate(["train-20260101-000000-aaaa", "train-20260101-000001-bbbb",
                              "eval-20260101-000002-cccc"]):
        job_json(tmp_path / name, pid=1, ticks=None, state="ended", started=10.0 + i,
                 result={"status": "succeeded"})
    assert [r.job_id for r in list_jobs(str(tmp_path))][0] == "eval-20260101-000002-cccc"
    assert resolve("eval", str(tmp_path)).job_id == "eval-20260101-000002-cccc"
    assert resolve("bbbb", str(tmp_path)).job_id == "train-20260101-000001-bbbb"
    assert resolve(None, str(tmp_path)).job_id == "eval-20260101-000002-cccc"
    with pytest.raises(ConfigError) as ambiguous:
        resolve("train", str(tmp_path))
    problem = ambiguous.value.problems[0]
    assert problem.code == "JOB_AMBIGUOUS" and "\n" not in problem.message
    assert "aaaa" in problem.message and "bbbb" in problem.message
    with pytest.raises(ConfigError) as unknown:
        resolve("nope", str(tmp_path))
    assert unknown.value.problems[0].code == "JOB_UNKNOWN"
    assert "eval-20260101-000002-cccc" in unknown.value.problems[0].message
    with pytest.raises(ConfigError) as none_running:
        resolve(None, str(tmp_path), running=True)
    assert none_running.value.problems[0].code == "JOB_UNKNOWN"


def test_a_log_is_read_from_its_end_then_incrementally(tmp_path):
    log = tmp_path / "rank_0.log"
    with open(log, "wb") as fh:
        for i in range(200_000):
            fh.write(b"line %d of a long log\n" % i)
    tail = LogTail(str(log))
    first = tail.read()
    assert tail.lines is None and tail.size == log.stat().st_size  # its start was never read
    assert len(b"\n".join(first)) <= FIRST_READ
    assert first[-1] == b"line 199999 of a long log"
    assert tail.screen.raw()[-1] == b"line 199999 of a long log"
    with open(log, "ab") as fh:
        fh.write(b"one more\nand a partial")
    assert tail.read() == [b"one more"]
    with open(log, "ab") as fh:
        fh.write(b" line\n")
    assert tail.read() == [b"and a partial line"]
    log.write_bytes(b"attempt 2 starts\n")  # a restart: the log replaced by a short one
    assert tail.read() == [b"attempt 2 starts"] and tail.lines == 1


def test_a_long_logs_lines_are_counted_within_a_bound_else_its_size_is_said(tmp_path):
    """A log longer than its first read: its lines before the tail are counted when they are
    at most COUNT_LIMIT bytes (the board says "N lines, M earlier lines in the log"); a longer
    one says its size and that its lines were not counted, never a guess."""
    me = os.getpid()
    folder = tmp_path / "job-20260101-000000-abcd"
    job_json(folder, pid=me, ticks=start_ticks(me))
    line = b"rank step and a few words of a chatty framework\n"  # 49 bytes
    counted = COUNT_LIMIT // len(line)  # just within the bound
    (folder / "rank_0.log").write_bytes(line * counted)
    (folder / "rank_1.log").write_bytes(line * (COUNT_LIMIT // len(line) * 3))
    follower = JobFollower(str(folder))
    follower.refresh()
    rows = {row.name: row for row in follower.view().rows}
    assert follower.logs["0"].size > FIRST_READ  # read from its end, yet counted
    assert rows["0"].lines == counted and rows["0"].log_bytes is None
    shown = len(rows["0"].tail)
    assert rows["0"].counted == f"{counted} lines, {counted - shown} earlier lines in the log"
    assert rows["1"].log_bytes == (folder / "rank_1.log").stat().st_size
    assert rows["1"].counted == f"last {len(rows['1'].tail)} lines of a 6.0 MiB log, too long " \
        "to count"
    text = render_text(follower.view())
    assert f"-- rank 0 ({rows['0'].counted}) --" in text and "too long to count" in text
    with open(folder / "rank_0.log", "ab") as fh:  # counted on from there
        fh.write(line * 3)
    follower.refresh()
    assert follower.view().rows[0].lines == counted + 3


def test_a_half_written_or_removed_folder_is_shown_as_what_it_holds(tmp_path):
    folder = tmp_path / "job-20260101-000000-abcd"
    folder.mkdir()
    (folder / "rank_0.log").write_bytes(b"hello\n")
    (folder / "rank_1.log").write_bytes(b"hi\n")
    follower = JobFollower(str(folder))
    record, new = follower.refresh()
    assert record.state == "lost" and new["0"] == [b"hello"]
    text = render_text(follower.view(final=True))
    assert "LOST" in text and "hello" in text
    (folder / "job.json").write_text('{"state": "runn')  # a torn write (never by the launcher)
    assert follower.refresh()[0].state == "lost"
    shutil.rmtree(folder)
    record, new = follower.refresh()
    assert record.state == "lost" and not any(new.values())
    assert "LOST" in render_text(follower.view(final=True))


def test_the_followed_board_draws_each_ranks_curve_from_its_spool(tmp_path):
    """The board of a job followed from its folder draws the same per-rank curve as the
    foreground one (loss from the spool): a diverging rank's curve rises."""
    folder = tmp_path / "job-20260101-000000-abcd"
    me = os.getpid()
    job_json(folder, pid=me, ticks=start_ticks(me))
    (folder / "tracking").mkdir()
    for rank, sign in (("0", -1), ("1", 1)):
        (folder / f"rank_{rank}.log").write_bytes(b"step\n")
        (folder / "tracking" / f"rank_{rank}.jsonl").write_text("".join(
            f'["m","loss",{1.0 + sign * step / 10},{step},{1000 + step}]\n'
            for step in range(20)))
    follower = JobFollower(str(folder))
    follower.refresh()
    view = follower.view()
    rows = {row.name: row for row in view.rows}
    assert rows["0"].curve_name == "loss" and rows["0"].curve[-1][1] < rows["0"].curve[0][1]
    assert rows["1"].curve[-1][1] > rows["1"].curve[0][1]
    assert "<svg" in render_html(view)


def test_jobs_json_says_when_a_job_started_in_iso_8601_with_its_offset(tmp_path):
    """`platform-run jobs --json`: `started` is ISO 8601 with the UTC offset of the machine's
    zone (TZ here: 8 hours east, POSIX spelling, no zone database needed), the same instant as
    `started_epoch`; a job whose job.json is not written yet has neither."""
    import datetime
    job_json(tmp_path / "train-20261205-032138-abcd", pid=1, ticks=None, state="ended",
             started=1796440898.5, result={"status": "succeeded", "duration_s": 3.0})
    (tmp_path / "eval-20261205-032139-abcd").mkdir()  # starting: its lock file only
    (tmp_path / "eval-20261205-032139-abcd" / ".launcher-vm.lock").touch()
    done = subprocess.run([sys.executable, "-m", "platform_plugin", "jobs", "--json", "--log-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TZ": "UTC-8"})
    assert done.returncode == 0, done.stderr
    jobs = {job["id"]: job for job in json.loads(done.stdout)}
    ended = jobs["train-20261205-032138-abcd"]
    assert ended["started"] == "2026-12-05T11:21:38+08:00", ended
    started = datetime.datetime.fromisoformat(ended["started"])
    assert started.timestamp() == int(ended["started_epoch"]) and ended["started_epoch"] == 1796440898.5
    starting = jobs["eval-20261205-032139-abcd"]
    assert starting["started"] is None and starting["started_epoch"] is None
