"""`platform-run launch` as a real process: exit codes, signals to the launcher, SIGKILL of the
launcher, stale ranks, busy ports, and rank-table jobs run with an HCCL stand-in."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from platform_plugin import launch
from platform_plugin.errors import ConfigError
from platform_plugin.util import folders
from tests.launcher.helpers import (ASSETS, BEHAVE, PY, free_port_pair, job_folder, log_text,
                                   private_table, read_job, start_cli, wait_for,
                                   wait_no_processes)

STANDIN = str(ASSETS / "hccl_standin.py")


def finish(proc: subprocess.Popen, timeout=60):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, out, err


def test_exit_codes_0_1_2(log_dir):
    code, out, _ = finish(start_cli(["--nproc", "2", "--", PY, BEHAVE, "ok"], log_dir))
    assert code == 0 and "[rank 1] hello from rank 1" in out and "succeeded" in out
    code, out, _ = finish(start_cli(["--nproc", "2", "--grace", "1", "--", PY, BEHAVE, "crash"],
                                    log_dir))
    assert code == 1 and "ROOT CAUSE" in out
    code, _, err = finish(start_cli(["--nproc", "2", "--backend", "torch", "--nnodes", "2",
                                     "--node-rank", "1", "--", PY, BEHAVE, "ok"], log_dir))
    assert code == 2 and "LAUNCH_MASTER_PORT" in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_to_the_launcher_stops_every_rank_as_asked(log_dir, sig):
    """The user's own stop is no failure: the table says INTERRUPTED, nothing says failed, and
    the exit code is 130 as for every platform-run command Ctrl-C ends (msrun exits 0)."""
    proc = start_cli(["--nproc", "2", "--grace", "1", "--", PY, BEHAVE, "grandchild", "nofail"],
                     log_dir)
    job_dir = job_folder(log_dir)
    wait_for(lambda: all("child up" in log_text(job_dir, str(r)) for r in range(2)),
             what=f"ranks and their children up (logs in {job_dir})")
    os.kill(proc.pid, sig)  # what a terminal's Ctrl-C / a batch system's stop does
    code, out, err = finish(proc)
    assert code == 130 and "INTERRUPTED" in out, out + err
    assert "JobFailed" not in out + err and "FAILED" not in out + err, out + err
    assert "failed" not in (out + err).lower(), out + err
    assert read_job(job_dir)["result"]["status"] == "interrupted"
    assert wait_no_processes(job_dir, timeout=5) == []


def test_sigkill_of_the_launcher_leaves_no_rank_nor_grandchild(log_dir):
    proc = start_cli(["--nproc", "2", "--", PY, BEHAVE, "grandchild", "nofail"], log_dir)
    job_dir = job_folder(log_dir)
    wait_for(lambda: all("child up" in log_text(job_dir, str(r)) for r in range(2)),
             what=f"ranks and their children up (logs in {job_dir})")
    os.kill(proc.pid, signal.SIGKILL)  # no handler runs: only PDEATHSIG + the lifeline remain
    proc.wait()
    assert wait_no_processes(job_dir, timeout=10) == []
    assert read_job(job_dir)["state"] == "running"  # the launcher never got to write the end


def test_the_job_folder_a_test_waits_for_is_never_the_log_folder_probe(log_dir, monkeypatch):
    """The preflight makes and removes a probe folder in the log folder just before the job
    folder exists; a loaded machine can pause the launcher in between, and a test that took
    that probe for the job folder waited 60 s for rank logs that were never there. The probe is
    held here (its removal does nothing) as a poller could catch it."""
    monkeypatch.setattr(folders.os, "rmdir", lambda path: None)
    monkeypatch.setattr(folders, "_surely_writable", lambda path: False)  # (as on /proc, a full disk)
    folders.check_writable_folder(str(log_dir), "log", "LAUNCH_LOG_DIR", "--log-dir")
    [probe] = list(log_dir.iterdir())  # the launcher's own probe, by its real name
    with pytest.raises(AssertionError, match="a job folder in"):
        job_folder(log_dir, timeout=0.3)
    (log_dir / "behave-20261130-115629-d50a").mkdir()
    assert job_folder(log_dir) == str(log_dir / "behave-20261130-115629-d50a") != str(probe)


def test_busy_port_is_refused_before_anything_starts(log_dir):
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ConfigError) as err:
            launch([PY, BEHAVE, "ok"], nproc=1, backend="torch", master_port=port,
                   tracking="none", log_dir=str(log_dir))
    assert err.value.problems[0].code == "LAUNCH_PORT_BUSY" and str(port) in str(err.value)
    assert list(log_dir.iterdir()) == []


def _table_env(ranktables, name, tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK_", "DEVICE_", "PLATFORM_", "MS_"))}
    return {**env, "RANK_TABLE_FILE": str(private_table(ranktables, name, tmp_path)),
            "PLATFORM_RUN_MODE": "full", **extra}


def test_rank_table_job_runs_the_ranks_with_hccl_ready_env(log_dir, ranktables, tmp_path):
    """No NPU/HCCL here: hccl_standin.py checks the env the way HCCL init would."""
    code, out, err = finish(start_cli(["--backend", "rank-table", "--", PY, STANDIN], log_dir,
                                      env=_table_env(ranktables, "hccl_4p_4567_10.0.0.1.json", tmp_path,
                                                     PLATFORM_CACHE_DIR=str(tmp_path / "cache"))))
    assert code == 0, out + err
    for rank, device in zip(range(4), range(4, 8)):
        assert f"[rank {rank}] HCCL-OK rank {rank} device {device} size 4" in out
    # a table of two servers is one job of two launchers: the table's first server hosts their
    # job link, so its server_id is made a loopback address here
    env = _table_env(ranktables, "hccl_2s_16p.json", tmp_path,
                     PLATFORM_CONTROL_PORT=str(free_port_pair()))
    table = Path(env["RANK_TABLE_FILE"])
    table.write_text(table.read_text().replace('"server_id": "10.', '"server_id": "127.'))
    procs = [start_cli(["--backend", "rank-table", "--", PY, STANDIN], log_dir / f"server{n}",
                       env={**env, "RANK_START": str(8 * n)}) for n in (0, 1)]
    (code0, out0, err0), (code, out, err) = [finish(proc, timeout=120) for proc in procs]
    assert code0 == 0 and code == 0, out0 + err0 + out + err
    assert all(f"HCCL-OK rank {8 + i} device {i} size 16" in out for i in range(8))


def test_ranks_of_an_earlier_job_on_the_same_devices_are_refused_or_killed(log_dir, ranktables,
                                                                          tmp_path):
    env = _table_env(ranktables, "hccl_4p_4567_10.0.0.1.json", tmp_path)
    first = start_cli(["--backend", "rank-table", "--", PY, STANDIN, "600"], log_dir, env=env)
    job_dir = job_folder(log_dir)
    wait_for(lambda: all("HCCL-OK" in log_text(job_dir, str(r)) for r in range(4)),
             what="first job's ranks up")
    pids = set(read_job(job_dir)["pids"].values())
    second = log_dir / "second"
    kw = dict(backend="rank-table", tracking="none", log_dir=str(second), write=lambda s: None)
    table = env["RANK_TABLE_FILE"]
    with pytest.raises(ConfigError) as err:
        launch([PY, STANDIN], rank_table=table, mode="full", **kw)
    assert err.value.problems[0].code == "LAUNCH_STALE_RANKS"
    assert all(str(pid) in str(err.value) for pid in pids) and "--kill-stale" in str(err.value)
    result = launch([PY, STANDIN], rank_table=table, mode="full", kill_stale=True, **kw)
    assert result.ok
    code, out, _ = finish(first)
    assert code == 1 and "SIGKILL" in out
    assert wait_no_processes(job_dir, timeout=5) == []


def test_an_in_process_launch_leaves_the_collector_as_it_found_it(log_dir, capsys):
    """`platform-run launch` imports the launch path with the collector off and freezes what it
    made (start-up time); a caller that goes on (main() called in-process) gets it back: on,
    nothing frozen by the launch - also when the job fails or is refused."""
    import gc

    from platform_plugin.cli import main
    before = (gc.isenabled(), gc.get_freeze_count())
    argv = ["launch", "--nproc", "1", "--tracking", "none", "--show", "none", "--log-dir",
            str(log_dir), "--", PY, "-c"]
    assert main(argv + ["pass"]) == 0
    assert (gc.isenabled(), gc.get_freeze_count()) == before
    assert main(argv + ["raise SystemExit(3)"]) == 1
    assert main(argv[:2] + ["0"] + argv[3:] + ["pass"]) == 2  # --nproc 0: refused
    assert (gc.isenabled(), gc.get_freeze_count()) == before
