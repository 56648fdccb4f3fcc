"""A full or read-only log disk, on a real small tmpfs (a private mount namespace: `unshare -m`
as root). The launcher runs inside the namespace; what it left is copied out before the
namespace (and its tmpfs) goes away."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.helpers import clean_env
from tests.launcher.helpers import ASSETS, BEHAVE, PY, job_processes

# mount the tmpfs, run the launcher in it, copy the job folder's record out
SCRIPT = r"""
set -u
mount -t tmpfs -o "size=$1" tmpfs "$2" || exit 97
[ "$3" = ro ] && mount -o remount,ro "$2"
cd "$4"
shift 4
"$@" > out.txt 2> err.txt
echo $? > rc.txt
for job in "$MNT"/logs/*; do
  [ -d "$job" ] || continue
  basename "$job" > job_id.txt
  cp "$job/job.json" job.json 2>/dev/null
  ls -la "$job" "$job/tracking" > listing.txt 2>&1
  du -sb "$job" > du.txt
done
df -k "$MNT" > df.txt
"""


def _can_unshare() -> str:
    if os.geteuid() != 0:
        return "needs root: a tmpfs is mounted in a private mount namespace"
    if not shutil.which("unshare"):
        return "needs unshare (util-linux)"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode:
        return f"unshare -m refused here: {probe.stderr.decode(errors='replace').strip()}"
    return ""


pytestmark = pytest.mark.skipif(bool(_can_unshare()), reason=_can_unshare() or "ok")


def run_on_tmpfs(tmp_path, size: str, mode: str, launcher_args: list[str], timeout=120) -> dict:
    mnt, cwd = tmp_path / "mnt", tmp_path / "cwd"
    mnt.mkdir()
    cwd.mkdir()
    env = clean_env(MNT=str(mnt), PLATFORM_CACHE_DIR=str(tmp_path / "cache"))
    cmd = ["unshare", "-m", "sh", "-c", SCRIPT, "sh", size, str(mnt), mode, str(cwd),
           PY, "-m", "platform_plugin", "launch", "--log-dir", str(mnt / "logs"), *launcher_args]
    done = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    read = lambda name: (cwd / name).read_text() if (cwd / name).exists() else ""  # noqa: E731
    return {"rc": int(read("rc.txt")), "out": read("out.txt"), "err": read("err.txt"),
            "job_id": read("job_id.txt").strip(), "job": json.loads(read("job.json") or "null"),
            "listing": read("listing.txt"), "df": read("df.txt"), "cwd": cwd,
            "job_dir": str(mnt / "logs" / read("job_id.txt").strip())}


def test_read_only_log_dir_is_refused_before_anything_starts(tmp_path):
    got = run_on_tmpfs(tmp_path, "1m", "ro", ["--nproc", "1", "--", PY, "-c", "pass"])
    assert got["rc"] == 2, got
    assert "[LAUNCH_LOG_DIR_READONLY]" in got["err"] and "Traceback" not in got["err"]
    assert not got["job_id"] and sorted(os.listdir(got["cwd"])) == sorted(
        ["out.txt", "err.txt", "rc.txt", "df.txt"])


@pytest.mark.slow
def test_log_disk_full_mid_run_stops_the_job_cleanly(tmp_path):
    """Ranks that print without end fill a 1 MiB log disk: every rank is stopped, the table
    says the disk is full, job.json holds the result, nothing is left running."""
    got = run_on_tmpfs(tmp_path, "1m", "rw", ["--nproc", "2", "--tracking", "none",
                                              "--show", "none", "--", PY, BEHAVE, "flood"])
    assert got["rc"] == 1, got
    assert "Traceback" not in got["err"] + got["out"], got
    assert "log disk is full" in got["out"] and "No space left on device" in got["out"]
    assert "stopped by launcher" in got["out"]
    job = got["job"]
    assert job["state"] == "ended" and job["result"]["status"] == "failed"
    assert "log disk is full" in job["result"]["reason"]
    assert {f["name"] for f in job["result"]["failures"]} == {"0", "1"}
    assert job_processes(got["job_dir"]) == []


@pytest.mark.slow
def test_log_disk_full_with_tracking_keeps_the_spool_and_says_how_to_deliver(tmp_path):
    """Same, with MLflow tracking (store outside the full disk): no traceback from the
    launcher or the forwarding helper, the spool stays, `platform-run sync` is named."""
    flood = str(ASSETS / "track_flood.py")
    got = run_on_tmpfs(tmp_path, "1m", "rw", ["--nproc", "2", "--tracking", "mlflow",
                                              "--show", "none", "--", PY, flood], timeout=240)
    assert got["rc"] == 1, got
    assert "Traceback" not in got["err"] + got["out"], got
    assert "log disk is full" in got["out"] and got["job"]["result"]["status"] == "failed"
    assert ".spool" in got["listing"] or "tracking" in got["listing"], got["listing"]
    assert "platform-run sync" in got["err"] + got["out"]
    assert job_processes(got["job_dir"]) == []


LAST_WORDS = "import os; os.write(1, (b'y' * 99 + b'\\n') * 8000)"  # 800 KB, then exit 0


def test_a_job_whose_last_lines_do_not_fit_the_log_disk_is_not_a_success(tmp_path):
    """The rank logs are written in batches (output.py's _RankLog): what a rank prints just
    before it ends is written after its end. That write failing (800 KB into a 512 KiB disk)
    made the job 'succeeded' with its log cut short: now it fails as any full disk does."""
    got = run_on_tmpfs(tmp_path, "512k", "rw", ["--nproc", "1", "--tracking", "none",
                                                "--show", "none", "--", PY, "-c", LAST_WORDS])
    assert got["rc"] == 1, got
    assert "log disk is full" in got["out"] and "No space left on device" in got["out"], got
    assert got["job"]["result"]["status"] == "failed", got["job"]
    assert "Traceback" not in got["err"] + got["out"], got
