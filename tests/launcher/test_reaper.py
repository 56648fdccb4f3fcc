"""Grandchildren that leave their rank's process group (`setsid`) are stopped too: at every end
of a job by the supervisor, and by the lifeline when the launcher is SIGKILLed. They are found
by the job's JOB_ID / PLATFORM_JOB_DIR in /proc/<pid>/environ; another job's processes, and the
sweeper's own ancestors, are left alone. Real processes throughout, no mocks."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from platform_plugin import launch
from platform_plugin.launcher.processes import reaper
from platform_plugin.util.procfs import alive
from tests.launcher.helpers import (BEHAVE, PY, job_folder, job_processes, kill_job, log_text, start_cli,
    wait_for, wait_no_processes)


def escaped(job_dir: str, ranks) -> list[int]:
    """The pids of the setsid grandchildren the ranks reported, checked to be outside the
    rank's process group (else this would test the group kill, not the sweep)."""
    pids = []
    for rank in ranks:
        for line in log_text(job_dir, rank).splitlines():
            if line.startswith("ESCAPED "):
                pid, child_group, rank_group = map(int, line.split()[1:])
                assert child_group == pid != rank_group
                pids.append(pid)
    return pids


@pytest.mark.parametrize("then, options, status", [
    ("ok", {}, "succeeded"),             # a daemon left by successful ranks
    ("crash", {}, "failed"),             # rank 1 exits 3: the others and every grandchild stop
    ("hang", {"timeout": 1.5}, "timeout"),
])
def test_setsid_grandchildren_are_gone_when_launch_returns(tmp_path, then, options, status):
    result = launch([PY, BEHAVE, "escape", then], nproc=2, backend="plain", tracking="none",
                    log_dir=str(tmp_path), grace=1.0, check=False, write=lambda s: None, **options)
    try:
        assert result.status == status
        assert len(escaped(result.job_dir, ["0", "1"])) == 2
        # the launcher waited for them: nothing of the job is left when launch() returns
        assert job_processes(result.job_dir) == []
    finally:
        kill_job(result.job_dir)


def test_sigkill_of_the_launcher_leaves_no_setsid_grandchild(log_dir):
    proc = start_cli(["--nproc", "2", "--backend", "plain", "--grace", "1", "--", PY, BEHAVE,
                      "escape", "hang"], log_dir)
    job_dir = job_folder(log_dir)
    grandchildren = wait_for(lambda: len(escaped(job_dir, ["0", "1"])) == 2
                             and escaped(job_dir, ["0", "1"]), what="setsid grandchildren up")
    assert all(alive(pid) for pid in grandchildren)
    os.kill(proc.pid, signal.SIGKILL)  # no handler runs: only PDEATHSIG + the lifeline remain
    proc.communicate()
    assert wait_no_processes(job_dir, timeout=30) == []


def test_another_jobs_processes_survive_the_sweep(tmp_path, log_dir):
    other = start_cli(["--nproc", "1", "--backend", "plain", "--grace", "1", "--", PY, BEHAVE,
                       "escape", "hang"], log_dir)
    try:
        other_dir = job_folder(log_dir)
        other_grandchild = wait_for(lambda: escaped(other_dir, ["0"]), what="other job up")[0]
        result = launch([PY, BEHAVE, "escape", "crash"], nproc=2, backend="plain",
                        tracking="none", log_dir=str(tmp_path / "mine"), grace=1.0, check=False,
                        write=lambda s: None)
        assert result.status == "failed" and job_processes(result.job_dir) == []
        assert alive(other_grandchild) and other_grandchild in job_processes(other_dir)
        assert other.poll() is None and len(job_processes(other_dir)) == 2  # rank + grandchild
        os.kill(other.pid, signal.SIGTERM)  # the other job's own end sweeps its own
        other.communicate(timeout=60)
        assert job_processes(other_dir) == []
    finally:
        if other.poll() is None:
            os.killpg(other.pid, signal.SIGKILL)
            other.communicate()


def test_the_lifeline_reaper_spares_itself_and_its_ancestors(tmp_path):
    """reaper.py run exactly as the lifeline runs it, by a shell that carries the job's JOB_ID
    itself (as a kernel started inside a job would): the job's process dies, another job's
    process and the reaper's own ancestors live."""
    job_dir = str(tmp_path / "job")
    sleeper = ("import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
               "print('up', flush=True)\ntime.sleep(300)")

    def start(job_id, directory):
        env = {**os.environ, "JOB_ID": job_id, "PLATFORM_JOB_DIR": directory}
        proc = subprocess.Popen([PY, "-c", sleeper], env=env, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        assert proc.stdout.readline() == "up\n"  # its SIGTERM handler is set
        return proc

    mine, others = start("job-a", job_dir), start("job-b", str(tmp_path / "other"))
    try:
        shell = subprocess.run(
            ["sh", "-c", '"$@"; echo "reaper exit $?"', "sh", PY, "-S", "-I", reaper.__file__,
             "0.5", "job-a", job_dir],
            env={**os.environ, "JOB_ID": "job-a", "PLATFORM_JOB_DIR": job_dir},
            capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0 and shell.stdout == "reaper exit 0\n"
        assert mine.wait(timeout=30) == -signal.SIGKILL  # ignored SIGTERM, so KILL after grace
        assert others.poll() is None and alive(others.pid)
    finally:
        for proc in (mine, others):
            proc.kill()
            proc.wait()


def test_a_lifeline_of_groups_alone_stops_its_group_and_matches_no_environment(tmp_path):
    """`Lifeline.for_groups` (a server's lifeline) runs the reaper with an empty job id and
    folder: it stops the group it was given, and a process whose JOB_ID is empty (it matches
    an empty id) is no business of it."""
    def start(**env):
        return subprocess.Popen([PY, "-c", "import time; time.sleep(300)"], start_new_session=True,
                                env={k: v for k, v in {**os.environ, **env}.items()
                                     if k != "PLATFORM_JOB_DIR"})
    group, bystander = start(), start(JOB_ID="")
    try:
        done = subprocess.run([PY, "-S", "-I", reaper.__file__, "0.5", "", "", str(group.pid)],
                              timeout=60)
        assert done.returncode == 0 and group.wait(timeout=30) == -signal.SIGTERM
        assert bystander.poll() is None and alive(bystander.pid)
    finally:
        for proc in (group, bystander):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("exit_code", [0, 3])
def test_launch_returns_with_its_lifeline_reaped(log_dir, exit_code, monkeypatch):
    """The supervisor releases the lifeline without waiting for its `sh` (job.json is written
    meanwhile); launch() collects its exit before returning, whether the job succeeded or
    failed: no zombie is left in the caller (a kernel) until some later Popen reaps it."""
    from platform_plugin.launcher.processes import spawn

    made = []
    original = spawn.Lifeline.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)
    monkeypatch.setattr(spawn.Lifeline, "__init__", init)
    launch([PY, "-c", f"raise SystemExit({exit_code})"], nproc=2, backend="plain",
           tracking="none", show="none", log_dir=str(log_dir), check=False,
           write=lambda text: None)
    assert len(made) == 1 and made[0]._proc.returncode == 0  # exited cleanly ("done"), reaped


def test_a_stray_without_the_job_folder_is_found_by_the_job_id_variable(tmp_path):
    """A job whose id the TF Adapter would refuse as JOB_ID (a '.' in its name) gives its
    processes another spelling; a setsid grandchild that dropped PLATFORM_JOB_DIR still carries
    that JOB_ID, and the end of the job finds it by it."""
    rank = tmp_path / "rank.py"
    rank.write_text(
        "import os, subprocess, sys\n"
        "env = {k: v for k, v in os.environ.items() if k != 'PLATFORM_JOB_DIR'}\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],\n"
        "                         env=env, start_new_session=True)\n"
        "print('STRAY', child.pid, os.environ['JOB_ID'], flush=True)\n")
    result = launch([PY, str(rank)], nproc=1, backend="plain", tracking="none",
                    job_name="tf1.v2", log_dir=str(tmp_path / "logs"), grace=1.0,
                    write=lambda s: None)
    [line] = [x for x in log_text(result.job_dir, "0").splitlines() if x.startswith("STRAY")]
    pid, job_id = int(line.split()[1]), line.split()[2]
    try:
        assert result.job_id.startswith("tf1.v2-") and job_id.startswith("tf1_v2-")
        assert not alive(pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
