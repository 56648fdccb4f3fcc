"""The failure table labels each process by what happened to it (its exit code or signal
against the signals the launcher had sent), not by when its end was seen: a rank that ended on
its own a moment after the stop began is not "stopped by launcher" (real ranks)."""
from __future__ import annotations

import re

import pytest

from platform_plugin import JobFailed, launch
from platform_plugin.launcher.display.result_table import render_result
from tests.launcher.helpers import PY, job_processes, kill_job

# rank 0 fails first; ranks 1-3 hold SIGTERM back until the launcher sends it (so each ends
# after the stop began, deterministically), then: 1 exits 3 of its own, 2 exits 0, 3 is killed
# by a SIGKILL the launcher did not send (the OOM killer's); rank 4 dies of the SIGTERM.
RANK = """
import os, signal, sys, time
rank, folder = int(os.environ["RANK_ID"]), os.environ["PLATFORM_JOB_DIR"]
if rank in (1, 2, 3):
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
open(os.path.join(folder, f"ready_{rank}"), "w").close()
print(f"rank {rank} ready", flush=True)
if rank == 0:  # fails once every rank holds SIGTERM as it means to (a loaded machine is slow)
    while len([n for n in os.listdir(folder) if n.startswith("ready_")]) < 5:
        time.sleep(0.02)
    sys.exit("rank 0: bad batch")
if rank == 4:
    time.sleep(60)
signal.sigwait([signal.SIGTERM])
print(f"rank {rank} saw the stop", flush=True)
if rank == 3:
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(3 if rank == 1 else 0)
"""


def test_each_process_is_labelled_by_what_ended_it(tmp_path):
    shown: list[str] = []
    with pytest.raises(JobFailed) as err:
        launch([PY, "-c", RANK], nproc=5, backend="plain", tracking="none", grace=20.0,
               log_dir=str(tmp_path), write=shown.append)
    result = err.value.result
    try:
        rows = {line.split()[1]: " ".join(line.split()[2:]) for line in
                render_result(result).splitlines() if line.startswith("  rank ")}
        assert "exit 1" in rows["0"] and rows["0"].endswith("ROOT CAUSE"), rows
        expected = {"1": "exit 3", "2": "exit 0", "3": "SIGKILL", "4": "SIGTERM"}
        notes = {"1": "ended after SIGTERM", "2": "ok", "3": "failed later",
                 "4": "stopped by launcher"}
        for rank, how in expected.items():
            assert f" {how} " in f" {rows[rank]} " and rows[rank].endswith(notes[rank]), (
                rank, rows, "".join(shown))
        assert "2" not in {f.name for f in result.failures}  # ended well during the stop
        assert re.fullmatch(r"2 2 \d+ exit 0 \d+\.\ds ok", rows["2"]), rows  # where, how long
        assert job_processes(result.job_dir) == []
    finally:
        kill_job(result.job_dir)


@pytest.mark.parametrize("returncode, sent, by_launcher", [
    (-15, (15,), True), (-9, (15, 9), True), (143, (15,), True),  # 143: a shell's SIGTERM
    (-9, (15,), False), (-11, (15, 9), False), (1, (15,), False), (0, (15,), False),
    (-15, (), False), (None, (15,), False),
])
def test_ended_by_compares_the_end_with_the_signals_sent(returncode, sent, by_launcher):
    from platform_plugin.launcher.processes.result import ended_by
    assert ended_by(returncode, sent) is by_launcher


SAME_BATCH = """
import os, sys, time
print(f"ready {os.getpid()}", flush=True)
while not os.path.exists(os.environ["GO_FILE"]):
    time.sleep(0.01)
sys.exit(f"rank {os.environ['RANK_ID']}: the same bad batch")
"""


def _zombie(pid: int) -> bool:
    """Ended, not yet collected by the launcher (its Popen's poll() has not seen it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_ranks_failing_together_before_the_stop_are_not_labelled_after_its_signal(tmp_path):
    """Two ranks fail on the same batch; the launcher sees both ends in one pass. The first is the
    root cause and its stop sends SIGTERM - the second had ended before that SIGTERM, and was
    labelled "ended after SIGTERM". The display's writer holds the launcher's loop until both
    ranks have ended (zombies), so both ends are seen in one pass, deterministically."""
    import time
    go = tmp_path / "go"
    shown: list[str] = []

    def write(text: str) -> None:
        shown.append(text)
        pids = [int(p) for p in re.findall(r"ready (\d+)", "".join(shown))]
        if len(pids) == 2 and not go.exists():
            go.touch()
            deadline = time.monotonic() + 30
            while not all(map(_zombie, pids)) and time.monotonic() < deadline:
                time.sleep(0.01)

    with pytest.raises(JobFailed) as err:
        launch([PY, "-c", SAME_BATCH], nproc=2, backend="plain", tracking="none",
               log_dir=str(tmp_path), write=write, env={"GO_FILE": str(go)})
    result = err.value.result
    kill_job(result.job_dir)
    notes = {f.name: (f.how, f.note) for f in result.failures}
    assert notes == {"0": ("exit 1", "ROOT CAUSE"),
                     "1": ("exit 1", "failed later")}, (notes, "".join(shown))
