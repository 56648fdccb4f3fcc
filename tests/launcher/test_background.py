"""Jobs that run while their starter does other things, and the commands that find them again:
`launch(background=True)`, `platform-run launch --detach`, `platform-run jobs|attach|stop`.
Real launchers, real ranks (tests/assets/launch/behave.py), real signals."""
from __future__ import annotations

import json
import re
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import platform_plugin
from platform_plugin.launcher.jobs.records import list_jobs, read_record
from platform_plugin.launcher.processes.result import JobFailed
from tests.helpers import clean_env, terminal_sigint, wait_for
from tests.launcher.helpers import (ASSETS, BEHAVE, PY, job_processes, log_text, private_table,
                                    wait_no_processes)

STANDIN = str(ASSETS / "hccl_standin.py")

pytestmark = pytest.mark.slow


def cli(*args: str, log_dir: Path, env: dict | None = None, timeout: float = 120):
    return subprocess.run([PY, "-m", "platform_plugin", *args, "--log-dir", str(log_dir)],
                          capture_output=True, text=True, timeout=timeout,
                          env=env or clean_env())


def detach(log_dir: Path, *args: str, env: dict | None = None) -> str:
    done = subprocess.run([PY, "-m", "platform_plugin", "launch", "--detach", "--log-dir",
                           str(log_dir), *args], capture_output=True, text=True, timeout=120,
                          env=env or clean_env())
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().splitlines()[-1]
    where = f"{job_id} --log-dir {shlex.quote(str(log_dir))}"  # the terminal is told what next
    assert f"`platform-run attach {where}` follows it, `platform-run stop {where}` stops it" in \
        done.stderr, done.stderr
    return job_id


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie of ours counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


@pytest.fixture
def launchers():
    """Launcher pids a test started; killed at teardown if a test left one running."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_two_background_jobs_run_at_once_on_disjoint_devices(log_dir, launchers, ranktables,
                                                              tmp_path):
    """Two background jobs of one server at once, devices 4-7 and 0-3 (rank tables; the HCCL
    stand-in, no NPU here), the caller free meanwhile; a third on devices 4-7 is refused as a
    foreground one would be (their ranks hold them); stop() ends each: interrupted, nothing
    left."""
    first = private_table(ranktables, "hccl_4p_4567_10.0.0.1.json", tmp_path)
    second = tmp_path / "low.json"
    text = first.read_text()
    for old, new in zip("4567", "0123"):
        text = text.replace(f'"device_id": "{old}"', f'"device_id": "{new}"')
    second.write_text(text)
    kw = dict(backend="rank-table", mode="full", tracking="none", background=True, grace=1,
              log_dir=str(log_dir), write=lambda text: None)
    jobs = [platform_plugin.launch([PY, STANDIN, "600"], rank_table=str(table),
                                   job_name=f"side{i}", **kw)
            for i, table in enumerate((first, second))]
    launchers += [j.process.pid for j in jobs]
    for job in jobs:
        wait_for(lambda: all("HCCL-OK" in log_text(job.job_dir, str(r)) for r in range(4)), 120)
    assert [j.state for j in jobs] == ["running", "running"]
    devices = [{r["env"]["DEVICE_ID"] for r in read_record(j.job_dir).plan["ranks"]}
               for j in jobs]
    assert devices == [{"4", "5", "6", "7"}, {"0", "1", "2", "3"}]
    with pytest.raises(platform_plugin.ConfigError) as busy:
        platform_plugin.launch([PY, STANDIN, "600"], rank_table=str(first), job_name="third",
                               **kw)
    assert busy.value.problems[0].code == "LAUNCH_STALE_RANKS"
    results = [j.stop() for j in jobs]
    assert [r.status for r in results] == ["interrupted", "interrupted"]
    for job in jobs:
        assert read_record(job.job_dir).data["launcher"]["how"] == "background"
        assert not wait_no_processes(job.job_dir)


def test_a_failing_background_job_raises_at_wait_with_its_root_cause(log_dir, launchers):
    job = platform_plugin.launch([PY, BEHAVE, "crash"], nproc=2, background=True, grace=1,
                                 tracking="none", log_dir=str(log_dir), write=lambda t: None)
    launchers.append(job.process.pid)
    with pytest.raises(JobFailed) as failed:
        job.wait(timeout=120)
    result = failed.value.result
    assert result.root_cause is not None and result.root_cause.name == "1"
    assert "about to fail: bad batch" in "\n".join(result.root_cause.last_lines)
    assert job.state == "failed"
    with pytest.raises(JobFailed):  # and again at the next wait
        job.wait()


def test_a_refused_background_job_raises_before_anything_exists(log_dir):
    with pytest.raises(platform_plugin.ConfigError) as refused:
        platform_plugin.launch([PY, BEHAVE, "ok"], nproc=2, background=True, tracking="none",
                               log_dir=str(log_dir), kill_stale=True, rank_table="/nonexistent",
                               write=lambda t: None)
    assert refused.value.problems
    assert not [d for d in log_dir.iterdir() if not d.name.startswith(".")]


def test_the_background_job_dies_with_its_starter_and_no_process_is_left(log_dir, tmp_path):
    """A kernel restart is a SIGKILL of the kernel: the lifeline stops its background job as
    the stop button does (interrupted, every rank gone)."""
    script = tmp_path / "starter.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time, platform_plugin
        job = platform_plugin.launch([{PY!r}, {BEHAVE!r}, "hang"], nproc=2, background=True,
                                     tracking="none", log_dir={str(log_dir)!r}, grace=1)
        print("JOB", job.job_dir, job.process.pid, flush=True)
        time.sleep(600)
    """))
    starter = subprocess.Popen([PY, str(script)], stdout=subprocess.PIPE, text=True,
                               env=clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", "")))
    try:
        line = wait_for(lambda: next((l for l in iter(starter.stdout.readline, "")
                                      if l.startswith("JOB")), None), 120)
        _, job_dir, pid = line.split()
        wait_for(lambda: read_record(job_dir).data and len(job_processes(job_dir)) >= 2, 60)
        starter.kill()
        starter.wait()
        record = wait_for(lambda: None if (r := read_record(job_dir)).running else r, 120)
        assert record.state == "interrupted", record.data
        wait_for(lambda: gone(int(pid)), 30)
        assert not wait_no_processes(job_dir)
    finally:
        starter.kill()


def test_detach_survives_its_terminal_and_stop_ends_it(log_dir, launchers):
    env = clean_env()
    job_id = detach(log_dir, "--nproc", "2", "--grace", "1", "--tracking", "none", "--",
                    PY, BEHAVE, "hang", env=env)
    record = read_record(str(log_dir / job_id))
    wait_for(lambda: read_record(record.job_dir).data is not None, 60)
    record = read_record(record.job_dir)
    launchers.append(record.launcher["pid"])
    assert record.state == "running" and record.launcher["how"] == "detached"
    listed = json.loads(cli("jobs", "--json", log_dir=log_dir).stdout)
    assert [(j["id"], j["state"]) for j in listed] == [(job_id, "running")]
    attach = subprocess.Popen([PY, "-m", "platform_plugin", "attach", "--log-dir", str(log_dir)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, preexec_fn=terminal_sigint)  # Ctrl-C as a terminal's
    wait_for(lambda: attach.stdout.readline().startswith(f"job {job_id}"), 60)
    attach.send_signal(signal.SIGINT)  # Ctrl-C detaches
    out, _ = attach.communicate(timeout=60)
    assert attach.returncode == 0 and f"detached from job {job_id}: it goes on" in out, out
    assert read_record(record.job_dir).state == "running"
    stopped = cli("stop", job_id[:12], log_dir=log_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert "interrupted" in stopped.stdout and "SIGTERM" in stopped.stdout, stopped.stdout
    assert read_record(record.job_dir).state == "interrupted"
    # as the stop button: where each live rank was, taken before SIGTERM (py-spy)
    assert sorted(p.name for p in (Path(record.job_dir) / "stacks").glob("rank_*.txt")) == \
        ["rank_0.txt", "rank_1.txt"]
    wait_for(lambda: gone(record.launcher["pid"]), 30)
    assert not wait_no_processes(record.job_dir)
    again = cli("stop", job_id, log_dir=log_dir)  # racing (here: after) the end: one result
    assert again.returncode == 0 and "not running (interrupted)" in again.stdout


def test_a_sigkilled_launcher_is_lost_and_attach_says_so(log_dir, launchers):
    job_id = detach(log_dir, "--nproc", "2", "--grace", "1", "--tracking", "none", "--",
                    PY, BEHAVE, "hang")
    job_dir = str(log_dir / job_id)
    wait_for(lambda: len(job_processes(job_dir)) >= 2 and read_record(job_dir).data, 60)
    pid = read_record(job_dir).launcher["pid"]
    launchers.append(pid)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: read_record(job_dir).state == "lost", 30)
    assert not wait_no_processes(job_dir)  # its lifeline stopped the ranks
    attached = cli("attach", log_dir=log_dir)
    assert attached.returncode == 1
    assert "LOST" in attached.stdout and "Traceback" not in attached.stderr, attached
    listed = cli("jobs", log_dir=log_dir)
    assert "lost" in listed.stdout


def test_two_attaches_at_once_follow_a_running_job_to_its_end_with_the_jobs_code(log_dir,
                                                                                 launchers):
    job_id = detach(log_dir, "--nproc", "2", "--tracking", "none", "--", PY, BEHAVE, "crash")
    attaches = [subprocess.Popen([PY, "-m", "platform_plugin", "attach", job_id, "--log-dir",
                                  str(log_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=clean_env()) for _ in range(2)]
    for attach in attaches:
        out, err = attach.communicate(timeout=120)
        assert attach.returncode == 1, err
        assert "about to fail: bad batch" in out and out.count("root cause: rank 1") == 1, out


def test_unknown_and_ambiguous_ids_name_the_candidates_exit_2(log_dir, launchers):
    ids = [detach(log_dir, "--nproc", "1", "--tracking", "none", "--job-name", "twin", "--",
                  PY, BEHAVE, "ok") for _ in range(2)]
    for job_id in ids:
        wait_for(lambda: read_record(str(log_dir / job_id)).state == "succeeded", 60)
    for command in ("attach", "stop"):
        ambiguous = cli(command, "twin", log_dir=log_dir)
        assert ambiguous.returncode == 2 and "[JOB_AMBIGUOUS]" in ambiguous.stderr
        problem = [l for l in ambiguous.stderr.splitlines() if "JOB_AMBIGUOUS" in l]
        assert len(problem) == 1 and all(i in problem[0] for i in ids)
        unknown = cli(command, "nosuchjob", log_dir=log_dir)
        assert unknown.returncode == 2 and "[JOB_UNKNOWN]" in unknown.stderr
        assert "Traceback" not in unknown.stderr + ambiguous.stderr


def test_another_users_job_is_refused(log_dir):
    """A job.json whose launcher runs as another user (uid 65534): stop refuses it."""
    if os.getuid() != 0:
        pytest.skip("needs root to start a process as another user")
    other = subprocess.Popen(["sleep", "60"], user=65534)
    try:
        folder = log_dir / "theirs-20260101-000000-abcd"
        folder.mkdir()
        ticks = int(open(f"/proc/{other.pid}/stat").read().rsplit(")", 1)[1].split()[19])
        (folder / "job.json").write_text(json.dumps({
            "state": "running", "plan": {"job_id": folder.name, "ranks": []},
            "launcher": {"pid": other.pid, "start_ticks": ticks, "uid": 65534,
                         "host": os.uname().nodename}}))
        refused = cli("stop", folder.name, log_dir=log_dir)
        assert refused.returncode == 2 and "[JOB_NOT_YOURS]" in refused.stderr, refused.stderr
        assert other.poll() is None  # not signalled
    finally:
        other.kill()
        other.wait()


def test_a_notebook_run_runs_a_background_job_in_the_foreground(log_dir):
    """platform-run debug|full (PLATFORM_NOTEBOOK_RUN set): the job runs in the foreground,
    said once, and a failure raises at once."""
    said = []
    env_before = os.environ.get("PLATFORM_NOTEBOOK_RUN")
    os.environ["PLATFORM_NOTEBOOK_RUN"] = "test-run"
    try:
        with pytest.raises(JobFailed):
            platform_plugin.launch([PY, BEHAVE, "crash"], nproc=2, background=True, grace=1,
                                   tracking="none", log_dir=str(log_dir), write=said.append)
    finally:
        if env_before is None:
            del os.environ["PLATFORM_NOTEBOOK_RUN"]
        else:
            os.environ["PLATFORM_NOTEBOOK_RUN"] = env_before
    text = "".join(said)
    assert text.count("runs the job in the foreground") == 1, text


def test_background_in_a_terminal_is_refused(log_dir):
    done = subprocess.run([PY, "-m", "platform_plugin", "launch", "--background", "--log-dir",
                           str(log_dir), "--", PY, BEHAVE, "ok"], capture_output=True, text=True,
                          env=clean_env(), timeout=60)
    assert done.returncode == 2 and "[LAUNCH_BACKGROUND_TERMINAL]" in done.stderr


SLOW_CRASH = """
import os, sys, time
for i in range(8):
    print("attempt", os.environ["PLATFORM_ATTEMPT_NUMBER"], "step", i, flush=True)
    time.sleep(0.5)
sys.exit(3 if os.environ["RANK_ID"] == "1" else 0)
"""


def test_attach_follows_a_job_through_its_restart_to_one_result(log_dir, launchers, tmp_path):
    """--max-restarts 1: the attempt's logs move into attempt-1/ while attach reads them; attach
    goes on with the new attempt's logs and ends once, with the last attempt's result."""
    rank = tmp_path / "slow_crash.py"
    rank.write_text(SLOW_CRASH)
    job_id = detach(log_dir, "--nproc", "2", "--grace", "1", "--max-restarts", "1",
                    "--tracking", "none", "--", PY, str(rank))
    attached = cli("attach", job_id, log_dir=log_dir)
    assert attached.returncode == 1, attached.stderr
    out = attached.stdout
    assert "restarting the whole job" in out, out
    seen = {line.split()[3] for line in out.splitlines() if line.startswith("[rank 1] attempt ")}
    assert len(seen) == 2, out  # lines of both attempts, followed across the restart
    assert "Traceback" not in out + attached.stderr
    assert out.count("— FAILED") == 1, out  # one final board
    record = read_record(str(log_dir / job_id))
    assert record.state == "failed" and record.attempt == 2
    assert (log_dir / job_id / "attempt-1" / "rank_1.log").exists()


# attempt 1: a loss of 900 and more, rank 1 fails; attempt 2: a loss of 3 and less, both succeed
RESTARTED_LOSS = """
import os, sys, time
attempt = int(os.environ["PLATFORM_ATTEMPT_NUMBER"])
for step in range(1, 41):
    loss = 900 + step if attempt == 1 else 2 + 1 / step
    print(f"epoch: 1 step: {step}, loss is {loss}", flush=True)
    if attempt == 1 and step == 12 and os.environ["RANK_ID"] == "1":
        sys.exit(3)
    time.sleep(0.25)
"""


def _losses(follower) -> dict[str, list[float]]:
    return {name: [value for _, value in found.main_curve()]
            for name, found in follower.spools.metrics.items()}


def test_a_restarted_jobs_board_shows_the_current_attempts_metrics(log_dir, launchers, tmp_path):
    """--max-restarts 1, tracked: a board that followed attempt 1 leaves its points for attempt
    2's once job.json says attempt 2, and `platform-run attach` started during attempt 2 shows
    attempt 2's loss, never attempt 1's (its spools are `tracking/`, attempt 2's
    `tracking-attempt-2/`)."""
    from platform_plugin.launcher.jobs.follow import JobFollower
    (tmp_path / "train.py").write_text(RESTARTED_LOSS)
    env = clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    job_id = detach(log_dir, "--nproc", "2", "--grace", "1", "--max-restarts", "1",
                    "--no-system-metrics", "--", PY, str(tmp_path / "train.py"), env=env)
    job_dir = str(log_dir / job_id)
    follower = JobFollower(job_dir)

    def attempt_1_seen():
        follower.refresh()
        return any(v >= 900 for values in _losses(follower).values() for v in values)
    wait_for(attempt_1_seen, 60, what="attempt 1's loss on the board")
    assert follower.record.attempt == 1

    def attempt_2_shown():
        record, _ = follower.refresh()
        losses = _losses(follower)
        return record.attempt == 2 and set(losses) == {"0", "1"} and all(losses.values()) \
            and all(v < 100 for values in losses.values() for v in values)
    wait_for(attempt_2_shown, 90, what="attempt 2's loss, and only it, on the same board")
    assert follower.record.running  # attempt 2 still runs: attach now
    assert "(attempt 2)" in follower.view().title
    attached = cli("attach", job_id, log_dir=log_dir, env=env)
    assert attached.returncode == 0, attached.stdout + attached.stderr
    shown = [float(v) for v in re.findall(r"\bloss=([0-9.]+)", attached.stdout)]
    assert shown and all(v < 100 for v in shown), attached.stdout
    assert "— running (attempt 2)" in attached.stdout and "— succeeded" in attached.stdout
    assert (Path(job_dir) / "tracking-attempt-2").is_dir()
