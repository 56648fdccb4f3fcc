"""What a torchrun user reads when an 8-rank job fails, from the real CLI in a terminal of 80
and 200 columns: a rank killed from outside (SIGKILL) is the root cause with the OOM hint,
a rank that raised a moment after the stop began is not "stopped by launcher", a rank that
ignored SIGTERM was killed after the grace; a timed-out job says where its ranks were stuck,
one line per place (not 8 rows 150 columns wide)."""
from __future__ import annotations

import re

from platform_plugin.launcher.display.result_table import render_result
from platform_plugin.launcher.processes.jobfile import read
from platform_plugin.launcher.processes.result import JobResult
from tests.cli.helpers import run_subprocess
from tests.helpers import clean_env
from tests.launcher.helpers import job_processes, kill_job

MIXED = """
import os, signal, time
rank, folder = int(os.environ["RANK_ID"]), os.environ["PLATFORM_JOB_DIR"]
if rank == 3:   # fails on its own once the stop began (a peer is gone)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
if rank == 6:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(folder, f"ready_{rank}"), "w").close()
print(f"rank {rank} starting", flush=True)
if rank == 5:   # once every rank is set up (a loaded machine starts them slowly)
    while len([n for n in os.listdir(folder) if n.startswith("ready_")]) < 8:
        time.sleep(0.02)
    os.kill(os.getpid(), signal.SIGKILL)   # the OOM killer's way
if rank == 3:
    signal.sigwait([signal.SIGTERM])
    raise RuntimeError("HCCL: peer rank 5 is gone (connection reset)")
time.sleep(120)
"""
HUNG = """
import os, time
def load_next_batch_from_the_shared_filesystem():
    time.sleep(120)
def allreduce_of_the_gradients_in_bucket_number_3():
    time.sleep(120)
print("step 1", flush=True)
rank = int(os.environ["RANK_ID"])
(load_next_batch_from_the_shared_filesystem if rank == 2
 else allreduce_of_the_gradients_in_bucket_number_3)()
"""


def _launch(tmp_path, script: str, columns: int, *options: str):
    (tmp_path / "job.py").write_text(script)
    outcome = run_subprocess(["launch", "--tracking", "none", "--backend", "plain", "--nproc", "8",
                              *options, "--", "python", "job.py"], tmp_path,
                             env=clean_env(COLUMNS=str(columns)), hang_s=60)
    job_dir = re.search(r"logs: (\S+)", outcome.out).group(1)
    kill_job(job_dir)
    assert outcome.rc == 1 and not outcome.traceback, outcome
    assert job_processes(job_dir) == []
    summary = outcome.out[outcome.out.index("\njob ") + 1:]
    return summary, job_dir


def _rows(summary: str) -> dict[str, list[str]]:
    return {line.split()[1]: line.split() for line in summary.splitlines()
            if line.startswith("  rank ")}


def _too_wide(summary: str, columns: int) -> list[str]:
    """Lines wider than the terminal, but the quoted log lines and the log folder (whole)."""
    return [line for line in summary.splitlines() if len(line) > columns
            and not line.startswith(("    | ", "  logs: "))]


def test_an_8_rank_job_with_a_kill_a_late_raise_and_a_stubborn_rank(tmp_path):
    summary, _ = _launch(tmp_path, MIXED, 80, "--grace", "2")
    assert re.search(r"root cause: rank 5 \(device 5, .*\) SIGKILL", summary), summary
    assert "hint: SIGKILL from outside the launcher: most often the out-of-memory" in summary
    rows = _rows(summary)
    assert rows["5"][-2:] == ["ROOT", "CAUSE"] and rows["5"][5] == "SIGKILL"
    assert rows["3"][5:7] == ["exit", "1"] and rows["3"][-3:] == ["ended", "after", "SIGTERM"]
    assert rows["6"][5] == "SIGKILL" and rows["6"][-3:] == ["stopped", "by", "launcher"]
    assert all(rows[r][5] == "SIGTERM" for r in "01247"), summary
    assert _too_wide(summary, 80) == [], summary


def test_an_8_rank_timeout_says_where_the_ranks_were_stuck_in_80_and_200_columns(tmp_path):
    summary, job_dir = _launch(tmp_path, HUNG, 80, "--timeout", "5", "--grace", "1")
    assert "TIMEOUT" in summary.splitlines()[0]
    assert _too_wide(summary, 80) == [], summary
    lines = summary.splitlines()
    # a timeout is no proof of a hang: where the ranks were, not where they were stuck
    where = lines.index("  where the ranks were (innermost frames; every frame in the job's "
                        "stacks/):")
    assert lines[where + 1].startswith("    ranks 0-1, 3-7: allreduce_of_the_gradients_in_bu")
    assert lines[where + 1].endswith("…") and lines[where + 2].startswith(
        "    rank 2:         load_next_batch_from_the_shared_filesystem (job.py:")
    wide = render_result(JobResult.from_dict(read(job_dir)["result"]), 200)  # the same job, 200 columns
    assert ("    ranks 0-1, 3-7: allreduce_of_the_gradients_in_bucket_number_3 (job.py:6) < "
            "<module> (job.py:9)") in wide.splitlines(), wide
    assert _too_wide(wide, 200) == []


def test_a_job_without_devices_gets_no_device_column(tmp_path):
    """A CPU box: every rank's device is unknown; a column of dashes (and "device -" in the
    root cause) said nothing."""
    from platform_plugin.launcher.processes.result import RankFailure
    cause = RankFailure("1", 1, None, "box", 42, 3, None, 1.5, ["boom"], root_cause=True)
    stopped = RankFailure("0", 0, None, "box", 41, -15, "SIGTERM", 1.6, stopped_by_launcher=True)
    result = JobResult("j", "j", str(tmp_path), "plain", "failed", False, 1.7,
                       {"0": -15, "1": 3}, [stopped, cause], cause)
    text = render_result(result)
    assert "root cause: rank 1 (host box, pid 42) exit 3" in text, text
    header = next(line for line in text.splitlines() if line.startswith("  process"))
    assert header.split() == ["process", "rank", "pid", "ended", "runtime", "note"], text
    with_device = JobResult("j", "j", str(tmp_path), "plain", "failed", False, 1.7, {"1": 3},
                            [RankFailure("1", 1, 4, "box", 42, 3, None, 1.5, root_cause=True)])
    assert "device" in render_result(with_device)
