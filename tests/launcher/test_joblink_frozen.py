"""A frozen server: one launcher of a running 2-server job stopped with SIGSTOP (what a hung
machine or a network partition looks like to the others), `--heartbeat-timeout 5`. Real
launchers on loopback; the ranks wait for a file that never comes (they would run 120 s)."""
from __future__ import annotations

import signal

import pytest

from tests.helpers import wait_for
from tests.launcher.helpers import (finish_all, free_port_pair, job_folder, kill_jobs, log_text,
                                    wait_no_processes)
from tests.launcher.test_joblink_hostile import ranks_running, start

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("frozen", [1, 0])
def test_a_frozen_launcher_is_named_and_the_others_end(tmp_path, frozen):
    """The other launcher ends non-zero well before its ranks would (120 s), naming the frozen
    server as silent, nothing of its job left running; once woken (SIGCONT), the frozen one
    ends non-zero too instead of hanging."""
    port, flag = free_port_pair(), tmp_path / "never"
    procs = [start(tmp_path, port, node, flag, ["--heartbeat-timeout", "5"]) for node in (0, 1)]
    other = 1 - frozen
    try:
        wait_for(lambda: ranks_running(tmp_path), 90, what="both servers' ranks run")
        procs[frozen].send_signal(signal.SIGSTOP)
        [(code, out)] = finish_all([procs[other]], timeout=60)  # far below the ranks' 120 s
        assert code == 1, out
        assert f"server node{frozen}: silent for 5 s (frozen or cut off)" in out, out
        assert "Traceback" not in out
        other_job = job_folder(tmp_path / f"server{other}")
        assert wait_no_processes(other_job) == []
        assert "ENV " in log_text(other_job, str(other))
        procs[frozen].send_signal(signal.SIGCONT)
        [(code, out)] = finish_all([procs[frozen]], timeout=60)
        # it checks the deadline before the messages queued while it slept (the other's
        # "ended" and "bye" would read as a clean end): it knows it was the frozen one
        assert code == 1 and "this launcher was frozen for" in out, out
        assert "Traceback" not in out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        kill_jobs([tmp_path / "server0", tmp_path / "server1"])
