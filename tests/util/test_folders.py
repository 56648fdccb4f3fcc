"""util/folders.py: a folder that cannot take the job's files is refused before anything exists;
the make-and-remove probe runs only where access(2) and statvfs cannot tell."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from platform_plugin.errors import ConfigError
from platform_plugin.util import folders
from tests.helpers import clean_env, needs_unshare, on_a_full_tmpfs


def test_a_writable_folder_on_a_real_file_system_needs_no_probe(tmp_path, monkeypatch):
    probes = []
    monkeypatch.setattr(folders, "_probe_entry", lambda path: probes.append(path) or "")
    folders.check_writable_folder(str(tmp_path / "logs" / "deeper"), "log", "LAUNCH_LOG_DIR",
                                  "--log-dir")
    assert probes == [] and list(tmp_path.iterdir()) == []  # nothing made, nothing probed


def test_proc_is_refused_even_for_root(tmp_path):
    """/proc has no blocks: access(2) says yes to root, the probe's mkdir says no."""
    with pytest.raises(ConfigError) as err:
        folders.check_writable_folder("/proc/no-such-folder/logs", "log", "LAUNCH_LOG_DIR",
                                      "--log-dir")
    assert err.value.problems[0].code == "LAUNCH_LOG_DIR_READONLY"


# run in a private mount namespace on a real tmpfs: statvfs and mkdir are the kernel's own; the
# probe is observed (wrapped, the real one runs), never replaced
_CHECK_ON_TMPFS = """
import json
from platform_plugin.errors import ConfigError
from platform_plugin.util import folders
probes, real_probe = [], folders._probe_entry
folders._probe_entry = lambda path: probes.append(path) or real_probe(path)
try:
    folders.check_writable_folder(sys.argv[1] + "/logs", "log", "LAUNCH_LOG_DIR", "--log-dir")
    code = None
except ConfigError as exc:
    code = exc.problems[0].code
st = os.statvfs(sys.argv[1])
print(json.dumps({"probes": probes, "code": code, "bavail": st.f_bavail, "favail": st.f_favail}))
"""


@needs_unshare
def test_a_file_system_without_a_free_block_is_probed_not_trusted(tmp_path):
    """A real 64 KiB tmpfs filled to its last block: statvfs reports no free block, so the
    probe asks the file system itself; a tmpfs still makes an empty folder then (no block
    needed), so the folder is taken - and the log disk's filling up later is handled by the
    supervisor (tests/launcher/test_disk.py)."""
    folder = tmp_path / "full"
    folder.mkdir()
    done = on_a_full_tmpfs(folder, "import os, sys\n" + _CHECK_ON_TMPFS)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["bavail"] == 0 and seen["probes"] == [str(folder)], seen
    assert seen["code"] is None, seen


_NO_INODE = """
import os, sys
i = 0
try:  # take every inode: no entry can be made there any more
    while True:
        os.close(os.open(os.path.join(sys.argv[1], "f%d" % i), os.O_CREAT | os.O_WRONLY))
        i += 1
except OSError:
    pass
"""


@needs_unshare
def test_a_file_system_without_a_free_inode_is_refused_as_read_only(tmp_path):
    """A real tmpfs whose inodes are all taken: statvfs says so, the probe's mkdir fails with
    ENOSPC, and the folder is refused before anything exists."""
    folder = tmp_path / "full"
    folder.mkdir()
    script = (f"mount -t tmpfs -o size=1m,nr_inodes=16 tmpfs {folder} && "
              f"{sys.executable} -c '{_NO_INODE}' {folder} && "
              f"{sys.executable} -c 'import os, sys\n{_CHECK_ON_TMPFS}' {folder}")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["favail"] == 0 and seen["probes"] == [str(folder)], seen
    assert seen["code"] == "LAUNCH_LOG_DIR_READONLY", seen
