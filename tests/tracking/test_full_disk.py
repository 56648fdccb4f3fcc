"""Tracking's state files on a full disk: a failed atomic write leaves no `.NAME.PID.tmp` behind
(before: an empty one per failed try - `.end.json.N.tmp`, `.helper.json.N.tmp` were left in a
job's tracking folder when the job folder's disk filled). The full disk is a small tmpfs in a
private mount namespace (`unshare -m`, as root)."""
from __future__ import annotations

import pytest

from platform_plugin.tracking.shared.state import write_json_atomic
from tests.helpers import REPO, needs_unshare, on_a_full_tmpfs

WRITE_ON_A_FULL_DISK = """
import errno
from platform_plugin.tracking.shared.state import write_json_atomic
folder = sys.argv[1]
try:
    write_json_atomic(os.path.join(folder, "end.json"), {"status": "FINISHED" * 2000})
except OSError as exc:
    assert exc.errno == errno.ENOSPC, exc
else:
    raise SystemExit("the write did not fail")
print(sorted(os.listdir(folder)))
"""


@needs_unshare
def test_a_state_file_write_on_a_full_disk_leaves_no_temporary_file(tmp_path):
    folder = tmp_path / "tracking"
    folder.mkdir()
    done = on_a_full_tmpfs(folder, WRITE_ON_A_FULL_DISK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['filler']", done.stdout


def test_a_state_file_that_cannot_be_encoded_leaves_no_temporary_file(tmp_path):
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "helper.json", {"pid": object()})
    assert list(tmp_path.iterdir()) == []


SAMPLER_ON_A_FULL_DISK = """
import subprocess, time, warnings
from types import SimpleNamespace
from platform_plugin.tracking.job.sysmetrics import SystemMetrics
from platform_plugin.tracking.rank.spool import SpoolWriter, encode, read_complete
folder = sys.argv[1]
filler, spool = os.path.join(folder, "filler"), os.path.join(folder, "rank_0.jsonl")
os.truncate(filler, os.path.getsize(filler) - 8192)
with open(spool, "wb") as f:  # a rank line cut short when its disk filled
    f.write(b"[" + b"1," * 2047 + b"1")  # 4,096 bytes: its page is full, one more byte needs a new one
fd = os.open(filler, os.O_WRONLY | os.O_APPEND)
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError:
    os.close(fd)
warnings.simplefilter("ignore")  # the writers say the disk is full: expected, not checked here
rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
metrics = SystemMetrics(folder, 0.05)
spec = SimpleNamespace(rank_id=0, device_id=None, env={}, role="worker")
metrics.started(SimpleNamespace(procs=[SimpleNamespace(spec=spec, popen=rank)]))
time.sleep(1.0)  # the thread opens its writer on the full disk and samples
metrics.ended(None)
rank.kill()
os.unlink(filler)  # room again: what the writer kept is written, the cut line ended first
writer = SpoolWriter(spool)
writer.append(encode("t", "phase", "after"))
writer.close()
chunk = read_complete(spool, 0)
with open(spool, "rb") as f:
    ended = f.read(4097)[-1:] == b"\\n"
print(ended, chunk.bad_lines, [record for record, _ in chunk.records][-1])
"""


@needs_unshare
def test_the_system_metrics_thread_on_a_full_disk_raises_nothing(tmp_path):
    """The launcher's sampler opens each rank's spool after the rank started: when the rank's
    last write was cut short by a full disk, ending that line failed with ENOSPC in the
    writer's constructor and the thread died with a traceback (a race under load: the sampler
    came late). The line is ended at the next write that fits; nothing is raised."""
    folder = tmp_path / "tracking"
    folder.mkdir()
    done = on_a_full_tmpfs(folder, SAMPLER_ON_A_FULL_DISK, env=f"PYTHONPATH={REPO}")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr, done.stderr
    assert done.stdout.strip() == "True 1 ['t', 'phase', 'after']", done.stdout + done.stderr
