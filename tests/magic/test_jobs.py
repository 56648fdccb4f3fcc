"""Background jobs in a real kernel: `%dist_run --background` returns at once and its board keeps
moving from a thread while other cells run; `%dist_jobs`, `%dist_attach`, `%dist_wait`,
`%dist_stop`; a kernel restart stops a background job and not a detached one, which
`platform-run stop` ends with its MLflow runs KILLED."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from jupyter_client.manager import start_new_kernel

from platform_plugin.launcher.jobs.records import list_jobs, read_record
from tests.helpers import clean_env, wait_for
from tests.launcher.helpers import BEHAVE, job_processes, kill_job, wait_no_processes
from tests.magic.helpers import run_cell

pytestmark = pytest.mark.slow
PY = sys.executable


def later_updates(kc, seconds: float) -> list[dict]:
    """The display updates the kernel sends while no cell runs (the board's thread)."""
    found, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=0.2)
        except Exception:  # noqa: BLE001 - queue.Empty
            continue
        if msg["msg_type"] == "update_display_data":
            found.append(msg["content"]["data"])
    return found


def test_a_background_job_leaves_the_kernel_free_and_its_board_moves(kernel):
    km, kc = kernel
    opts = f"--tracking none --log-dir {kc.log_dir} --grace 1"
    assert run_cell(kc, "%load_ext platform_plugin").ok
    started = run_cell(kc, f"%dist_run --background --nproc 2 {opts} python {BEHAVE} chatty",
                       timeout=120)
    assert started.ok, started.error
    assert "runs in the background (--background)" in started.stream
    assert "a kernel restart or shutdown stops it" in started.stream
    job = run_cell(kc, "print(_dist_job.job_id, _dist_job.state)")
    job_id, state = job.stream.split()
    assert state == "running"
    # what the saved output says once a page reload stopped the board: the way back
    assert (f"after a page reload this board stops moving: `%dist_attach {job_id} --log-dir "
            f"{kc.log_dir}` in a new cell follows the job again") in started.stream
    other = run_cell(kc, "print(6 * 7)")  # the kernel runs other cells meanwhile
    assert other.ok and other.stream.strip() == "42"
    updates = later_updates(kc, 3)
    assert len(updates) >= 2, "the board did not move after its cell returned"
    boards = [u["text/plain"] for u in updates]
    assert boards[-1] != boards[0] and "tick" in boards[-1] and job_id in boards[-1]
    # %dist_attach, then the stop button: it detaches and says the job goes on
    attach_id = kc.execute(f"%dist_attach --log-dir {kc.log_dir}")
    wait_for(lambda: later_updates(kc, 0.5) or None, 60, what="the attached board")
    km.interrupt_kernel()
    said = ""
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != attach_id:
            continue
        if msg["msg_type"] == "stream":
            said += msg["content"]["text"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert f"detached from job {job_id}: it goes on" in said, said
    detached = run_cell(kc, "print(_dist_job.state)")
    assert detached.stream.strip() == "running"
    listed = run_cell(kc, f"%dist_jobs --log-dir {kc.log_dir}")
    assert job_id in listed.stream and "running" in listed.stream
    stopped = run_cell(kc, f"%dist_stop --log-dir {kc.log_dir}", timeout=120)
    assert stopped.ok and "interrupted" in stopped.stream, stopped.stream
    final = later_updates(kc, 2)
    assert any("INTERRUPTED" in u["text/plain"] for u in final), final
    assert read_record(str(kc.log_dir / job_id)).state == "interrupted"
    assert not wait_no_processes(str(kc.log_dir / job_id))


def test_a_failing_background_job_raises_at_dist_wait(kernel):
    km, kc = kernel
    opts = f"--tracking none --log-dir {kc.log_dir} --grace 1"
    run_cell(kc, "%load_ext platform_plugin")
    started = run_cell(kc, f"%dist_run --background --nproc 2 {opts} python {BEHAVE} crash")
    assert started.ok, started.error
    waited = run_cell(kc, "%dist_wait", timeout=120)
    assert not waited.ok and waited.reply["ename"] == "JobFailed", waited.reply
    assert "rank 1" in "".join(waited.error)
    final = later_updates(kc, 2) + [d for _, d in started.displays]
    # the cell that started it shows the root cause in the same output
    assert any("root cause: rank 1" in d["text/plain"] for d in final) or \
        "root cause: rank 1" in run_cell(kc, f"%dist_attach --log-dir {kc.log_dir}").board


def test_attach_follows_a_job_a_terminal_started_then_shows_its_result(kernel):
    km, kc = kernel
    run_cell(kc, "%load_ext platform_plugin")
    done = subprocess.run([PY, "-m", "platform_plugin", "launch", "--detach", "--log-dir",
                           str(kc.log_dir), "--tracking", "none", "--nproc", "2", "--", PY,
                           BEHAVE, "lines", "5"], capture_output=True, text=True,
                          env=clean_env(), timeout=120, cwd=kc.cwd)
    job_id = done.stdout.split()[-1]
    attached = run_cell(kc, f"%dist_attach {job_id} --log-dir {kc.log_dir}", timeout=120)
    assert attached.ok, attached.error
    assert "succeeded" in attached.board and "rank 1 line 4" in attached.board
    assert f"job {job_id} succeeded" in attached.board


def test_a_kernel_restart_stops_a_background_job_not_a_detached_one(tmp_path):
    """A background job dies with its kernel (no orphan: interrupted, no process left); a
    detached one survives the restart, and `platform-run stop` ends it: nothing left, its
    MLflow runs KILLED."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = clean_env(MLFLOW_TRACKING_URI=store)
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path), env=env)
    logs = tmp_path / "logs"
    try:
        run_cell(kc, "%load_ext platform_plugin")
        opts = f"--log-dir {logs} --grace 1 --nproc 2"
        kept = run_cell(kc, f"%dist_run --detach {opts} python {BEHAVE} chatty", timeout=180)
        tied = run_cell(kc, f"%dist_run --background --tracking none {opts} python {BEHAVE} "
                        "chatty", timeout=180)
        assert kept.ok and tied.ok, (kept.error, tied.error)
        def both_started():
            found = list_jobs(str(logs))
            return found if len(found) == 2 and all(r.data for r in found) else None
        jobs = {r.launcher.get("how"): r for r in wait_for(both_started, 60)}
        km.restart_kernel(now=True)
        tied_end = wait_for(lambda: None if (r := read_record(jobs["background"].job_dir))
                            .running else r, 120)
        assert tied_end.state == "interrupted"
        assert not wait_no_processes(tied_end.job_dir)
        detached = read_record(jobs["detached"].job_dir)
        assert detached.state == "running" and job_processes(detached.job_dir)
        stopped = subprocess.run([PY, "-m", "platform_plugin", "stop", detached.job_id,
                                  "--log-dir", str(logs)], capture_output=True, text=True,
                                 env=env, timeout=180, cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert read_record(detached.job_dir).state == "interrupted"
        assert not wait_no_processes(detached.job_dir)
        wait_for(lambda: _run_statuses(store, detached.job_id) == {"KILLED"}, 120,
                 what="the runs KILLED")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        for folder in logs.iterdir() if logs.exists() else ():
            kill_job(str(folder))
            pid = (read_record(str(folder)).launcher or {}).get("pid")
            if pid and read_record(str(folder)).running:
                os.kill(pid, 9)


def _run_statuses(store: str, job_id: str) -> set[str]:
    """Opened as the project's own readers open a store: under its lock (a job's writer may be
    creating the fresh store at that moment; opened together, its migration fails)."""
    import mlflow

    from platform_plugin.tracking.sinks.mlflow_sink import store_lock
    with store_lock(store):
        client = mlflow.MlflowClient(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              f"tags.job_id = '{job_id}'")
    return {r.info.status for r in runs}
