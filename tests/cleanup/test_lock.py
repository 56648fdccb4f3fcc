"""CODE/'s lock (util/code_lock.py): busy while held, shared holders together, and the lock
file is removed by its last holder - before, every cleaned folder left one in /tmp (366 after
a few test runs)."""
from __future__ import annotations

import os

import pytest

from platform_plugin.util.code_lock import RootLock, lock_path
from platform_plugin.errors import ConfigError


def test_the_last_holder_removes_the_lock_file_and_busy_names_the_holder(tmp_path):
    full = RootLock(tmp_path, "a full run of nb.ipynb").acquire(exclusive=True)
    with pytest.raises(ConfigError, match=r"CLEAN_ROOT_BUSY.*a full run of nb.ipynb \(pid"):
        RootLock(tmp_path, "a cleanup").acquire(exclusive=True)
    full.release()
    assert not os.path.exists(lock_path(tmp_path))
    first = RootLock(tmp_path, "run 1").acquire(exclusive=False)
    second = RootLock(tmp_path, "run 2").acquire(exclusive=False)  # shared: together
    with pytest.raises(ConfigError, match="CLEAN_ROOT_BUSY"):
        RootLock(tmp_path, "a cleanup").acquire(exclusive=True)
    first.release()
    assert os.path.exists(lock_path(tmp_path))  # run 2 still holds it
    second.release()
    assert not os.path.exists(lock_path(tmp_path))
    RootLock(tmp_path, "a cleanup").acquire(exclusive=True).release()
