"""Tracking's state files on a full disk: a failed atomic write leaves no `.NAME.PID.tmp` behind
(before: an empty one per failed try - `.end.json.N.tmp`, `.helper.json.N.tmp` were left in a
job's tracking folder when the job folder's disk filled). The full disk is a small tmpfs in a
private mount namespace (`unshare -m`, as root)."""
from __future__ import annotations

import pytest

from platform_plugin.tracking.shared.state import write_json_atomic
from tests.helpers import needs_unshare, on_a_full_tmpfs

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
