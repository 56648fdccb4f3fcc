"""The supervisor with real rank processes: success, failures, deadlines, leftovers, output."""
from __future__ import annotations

import os

import pytest

from platform_plugin import ConfigError, JobFailed, launch
from platform_plugin.launcher.display.result_table import render_result
from platform_plugin.launcher.processes.jobfile import read
from tests.launcher.helpers import BEHAVE, PY, job_processes, kill_job, log_text


@pytest.fixture
def run(tmp_path):
    """launch() with tracking off, display captured; kills leftovers if a test fails."""
    shown: list[str] = []
    started: list[str] = []

    def _run(mode, *args, nproc=3, **kw):
        kw.setdefault("tracking", "none")
        kw.setdefault("grace", 2.0)
        try:
            result = launch([PY, BEHAVE, mode, *map(str, args)], nproc=nproc,
                            log_dir=str(tmp_path), write=shown.append, **kw)
        except JobFailed as exc:
            started.append(exc.result.job_dir)
            raise
        started.append(result.job_dir)
        return result

    _run.shown = shown
    yield _run
    for job_dir in started:
        kill_job(job_dir)


def test_success_sets_each_rank_env_and_leaves_the_callers_env_alone(run):
    before = dict(os.environ)
    result = run("env", nproc=3, backend="plain")
    assert os.environ == before
    assert result.ok and result.status == "succeeded" and result.exitcodes == {"0": 0, "1": 0, "2": 0}
    import json
    envs = [json.loads(log_text(result.job_dir, str(i)).split("ENV ", 1)[1]) for i in range(3)]
    for i, env in enumerate(envs):
        assert (env["RANK_ID"], env["LOCAL_RANK"], env["DEVICE_ID"], env["RANK_SIZE"]) == (
            str(i), str(i), str(i), "3")
        assert env["JOB_ID"] == result.job_id and env["PLATFORM_JOB_DIR"] == result.job_dir
        assert env["PYTHONUNBUFFERED"] == "1" and env["PLATFORM_JOB_NAME"] == "behave"
    job = read(result.job_dir)
    assert job["state"] == "ended" and job["result"]["status"] == "succeeded"
    assert set(job["pids"]) == {"0", "1", "2"} and job["plan"]["backend"] == "plain"
    assert any(line.startswith("[rank 2] ENV ") for line in "".join(run.shown).splitlines())


def test_buffered_ranks_keep_their_own_buffering_and_lose_nothing(run, monkeypatch):
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")  # even when the caller's own env asks for it
    result = run("env", nproc=2, backend="plain", buffered=True)
    import json
    envs = [json.loads(log_text(result.job_dir, str(i)).split("ENV ", 1)[1]) for i in range(2)]
    assert all("PYTHONUNBUFFERED" not in env for env in envs)
    lines = run("lines", 2000, nproc=2, backend="plain", buffered=True)
    for rank in ("0", "1"):
        assert log_text(lines.job_dir, rank).count("\n") >= 2000


def test_crash_exit_3_stops_the_others_and_names_the_root_cause(run):
    with pytest.raises(JobFailed) as err:
        run("crash", nproc=3)
    result = err.value.result
    assert result.status == "failed" and not result.ok
    cause = result.root_cause
    assert (cause.name, cause.rank_id, cause.device_id, cause.exitcode) == ("1", 1, 1, 3)
    assert cause.pid and cause.host and "about to fail: bad batch" in cause.last_lines
    others = [f for f in result.failures if not f.root_cause]
    assert {f.name for f in others} == {"0", "2"}
    assert all(f.stopped_by_launcher and f.signal_name == "SIGTERM" for f in others), others
    table = render_result(result)
    assert "ROOT CAUSE" in table and "exit 3" in table and "about to fail" in table
    assert "rank 1 exit 3" in str(err.value)
    assert read(result.job_dir)["result"]["root_cause"]["exitcode"] == 3
    assert job_processes(result.job_dir) == []


def test_sigsegv_is_reported_by_signal_name(run):
    with pytest.raises(JobFailed) as err:
        run("segv", nproc=2)
    cause = err.value.result.root_cause
    assert cause.name == "1" and cause.signal_name == "SIGSEGV" and cause.exitcode == -11
    assert job_processes(err.value.result.job_dir) == []


def test_timeout_stops_a_job_that_runs_too_long(run):
    with pytest.raises(JobFailed) as err:
        run("chatty", nproc=2, timeout=1.5)
    result = err.value.result
    assert result.status == "timeout" and result.root_cause is None and "--timeout" in result.reason
    assert all(f.stopped_by_launcher for f in result.failures) and len(result.failures) == 2
    assert "TIMEOUT" in render_result(result)
    assert job_processes(result.job_dir) == []


def test_silence_timeout_detects_a_hang_but_not_a_chatty_rank(run, tmp_path):
    with pytest.raises(JobFailed) as err:
        run("hang", nproc=2, silence_timeout=1.0)
    assert err.value.result.status == "hung" and "silence" in err.value.result.reason
    # the chatty rank is a shell loop, not Python: its first line comes within milliseconds of
    # the spawn even on a loaded machine, where a Python start alone can take more than the 1 s
    # of silence allowed (it was then taken for hung before it had printed anything)
    with pytest.raises(JobFailed) as err:
        launch(["sh", "-c", CHATTY_SH], nproc=1, silence_timeout=1.0, timeout=3.0,
               tracking="none", log_dir=str(tmp_path), write=lambda text: None)
    result = err.value.result
    assert result.status == "timeout", result.reason
    assert log_text(result.job_dir, "0").count("tick") >= 10  # it talked all along
    assert job_processes(result.job_dir) == []


CHATTY_SH = "while :; do echo tick; sleep 0.2; done"  # never silent, never ends


def test_a_grandchild_ignoring_sigterm_is_killed_too(run):
    with pytest.raises(JobFailed) as err:
        run("grandchild", nproc=2, grace=1.0)
    result = err.value.result
    assert result.root_cause.name == "1" and result.root_cause.exitcode == 3
    assert "child up" in log_text(result.job_dir, "0")
    assert job_processes(result.job_dir) == []




def test_log_files_hold_every_byte_and_the_display_handles_awkward_output(run):
    n = 20000
    result = run("lines", n, nproc=3)
    for rank in range(3):
        raw = open(f"{result.job_dir}/rank_{rank}.log", "rb").read()
        expected = (f"READY ".encode())
        assert raw.startswith(expected)
        body = raw.split(b"\n", 1)[1]
        lines = b"".join(b"rank %d line %d\n" % (rank, i) for i in range(n))
        assert body == lines + (b"progress 10%\rprogress 50%\rprogress 100%\n"
                                b"bad bytes \xff\xfe end\nno newline at the end")
    shown = "".join(run.shown).splitlines()
    for rank in range(3):
        mine = [l for l in shown if l.startswith(f"[rank {rank}] ")]
        assert len([l for l in mine if " line " in l]) == n
        assert f"[rank {rank}] progress 100%" in mine
        assert f"[rank {rank}] bad bytes \ufffd\ufffd end" in mine
        assert f"[rank {rank}] no newline at the end" in mine


def test_display_cap_holds_lines_back_but_logs_stay_complete(run):
    result = run("lines", 3000, nproc=2, max_lines_per_s=50, show="1")
    shown = "".join(run.shown)
    assert "[rank 0]" not in shown
    assert shown.count("[rank 1] rank 1 line") < 3000 and "lines held back" in shown
    assert result.held_back["1"] > 0 and "0" not in result.held_back
    assert log_text(result.job_dir, "1").count("rank 1 line") == 3000
    assert log_text(result.job_dir, "0").count("rank 0 line") == 3000


def test_a_missing_program_is_refused_before_anything_is_created(run, tmp_path):
    logs = tmp_path / "logs"
    with pytest.raises(ConfigError) as err:
        launch([str(tmp_path / "nope.sh")], nproc=1, backend="plain", tracking="none",
               log_dir=str(logs), write=run.shown.append)
    assert "LAUNCH_PROGRAM_MISSING" in str(err.value) and not logs.exists()


def test_scheduler_failure_fails_the_job(run):
    """ms-cluster with a stand-in program (no MindSpore needed): the scheduler exits 5."""
    with pytest.raises(JobFailed) as err:
        run("sched-dies", nproc=2, backend="ms-cluster")
    cause = err.value.result.root_cause
    assert cause.name == "sched" and cause.exitcode == 5 and cause.rank_id is None
    assert "scheduler: cannot bind" in log_text(err.value.result.job_dir, "sched")
    assert "[sched] scheduler: cannot bind" in "".join(run.shown)
    assert "sched" in render_result(err.value.result)


def test_a_daemon_left_by_a_successful_rank_is_removed(run):
    result = run("daemon", nproc=2, grace=0.5)
    assert result.ok and result.status == "succeeded"
    assert job_processes(result.job_dir) == []


def test_a_failure_to_set_up_the_watch_stops_the_ranks_already_started(tmp_path, monkeypatch):
    """The ranks are spawned before the supervisor, output and job.json are set up (job.py's
    Attempt, start-up time): when that set-up fails (here an interrupt: the CLI's SIGTERM), every rank
    already started is stopped, and Ctrl-C goes back to its handler."""
    import signal

    from platform_plugin.launcher.job import Attempt
    seen: dict = {}

    def broken(attempt, *args):
        plan = attempt.plan
        seen["job_dir"], seen["running"] = plan.job_dir, job_processes(plan.job_dir)
        raise KeyboardInterrupt
    monkeypatch.setattr(Attempt, "_set_up", broken)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        launch([PY, "-c", "import time; time.sleep(600)"], nproc=2, backend="plain",
               tracking="none", log_dir=str(tmp_path), write=lambda s: None)
    assert len(seen["running"]) == 2  # both ranks ran when the set-up failed
    assert job_processes(seen["job_dir"]) == [] and signal.getsignal(signal.SIGINT) is before


def test_an_unexpected_error_while_spawning_stops_the_ranks_already_started(tmp_path, monkeypatch):
    """spawn.start_job: the third spawn raises something no refusal foresaw; the two ranks
    already running are stopped before the error reaches the caller (the lifeline ends cleanly)."""
    import signal

    from platform_plugin.launcher.processes import spawn
    real, seen = spawn.spawn, {}

    def third_fails(argv, env, cwd):
        if len(seen.setdefault("pids", [])) == 2:
            seen["job_dir"], seen["running"] = env["PLATFORM_JOB_DIR"], job_processes(
                env["PLATFORM_JOB_DIR"])
            raise RuntimeError("unexpected")
        popen = real(argv, env, cwd)
        seen["pids"].append(popen.pid)
        return popen
    monkeypatch.setattr(spawn, "spawn", third_fails)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(RuntimeError, match="unexpected"):
        launch([PY, "-c", "import time; time.sleep(600)"], nproc=3, backend="plain",
               tracking="none", log_dir=str(tmp_path), write=lambda s: None)
    assert len(seen["running"]) == 2
    assert job_processes(seen["job_dir"]) == [] and signal.getsignal(signal.SIGINT) is before


def test_a_rank_log_that_cannot_be_opened_stops_the_started_ranks(run, monkeypatch):
    """The logs are opened once the ranks run (spawn first): a log the disk refuses then (here
    ENOSPC, faked: the folder was writable a moment before) fails the job and stops every rank."""
    import errno

    from platform_plugin.launcher.display import output
    real = output.Output.open

    def second_fails(self, name, log_path):
        if name == "1":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, name, log_path)
    monkeypatch.setattr(output.Output, "open", second_fails)
    with pytest.raises(JobFailed) as err:
        run("hang", nproc=2, grace=0.5)
    result = err.value.result
    assert result.status == "failed" and "cannot open the rank logs" in result.reason
    assert "No space left on device" in result.reason and job_processes(result.job_dir) == []
