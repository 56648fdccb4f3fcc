"""util/folders.py: a folder that cannot take the job's files is refused before anything exists;
the make-and-remove probe runs only where access(2) and statvfs cannot tell."""
from __future__ import annotations

import os

import pytest

from platform_plugin.errors import ConfigError
from platform_plugin.util import folders


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


def test_a_full_file_system_is_probed(tmp_path, monkeypatch):
    """No free block: only making an entry tells (root may still use the reserved blocks)."""
    real = os.statvfs(tmp_path)
    full = os.statvfs_result((real.f_bsize, real.f_frsize, real.f_blocks, 0, 0, real.f_files,
                              real.f_ffree, real.f_favail, real.f_flag, real.f_namemax))
    monkeypatch.setattr(folders.os, "statvfs", lambda path: full)
    probes = []
    monkeypatch.setattr(folders, "_probe_entry",
                        lambda path: probes.append(path) or "cannot create entries there")
    with pytest.raises(ConfigError) as err:
        folders.check_writable_folder(str(tmp_path), "log", "LAUNCH_LOG_DIR", "--log-dir")
    assert probes == [str(tmp_path)] and "_READONLY" in err.value.problems[0].code
