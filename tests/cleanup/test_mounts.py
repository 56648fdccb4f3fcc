"""Cleanup never descends into another filesystem nor through a mount point: real bind and
tmpfs mounts under CODE/, made in a private mount namespace (`unshare -m`, as root), with
`platform-run clean` run inside that namespace."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from platform_plugin.cleanup.mounts import _unescape, mount_points_below

from tests.helpers import clean_env, needs_unshare
from tests.notebook.helpers import snapshot, write_tree


def clean_in_namespace(mounts: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`mount ...` commands, then `platform-run clean ARGS`, in one private mount namespace
    (the mounts vanish with it: nothing to unmount, nothing leaks into the host)."""
    clean = shlex.join([sys.executable, "-m", "platform_plugin", "clean", *args])
    script = " && ".join(mounts + [clean])
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=120)


@needs_unshare
@pytest.mark.parametrize("dry_run", [True, False])
def test_bind_mounts_and_other_filesystems_under_code_are_never_entered(tmp_path, dry_run):
    root, outside = tmp_path / "CODE", tmp_path / "outside"
    write_tree(outside, {"x.log": "precious", "k.o": "kernel", "sub/w.ckpt": "weights"})
    write_tree(root, {"train.py": "", "kernel_meta/k.o": "1", "kernel_meta/mnt/.keep": "",
                      "rank_0/graph_cache/.keep": "", "exp/.keep": "", "old.log": "2",
                      "bound.log": ""})
    before_outside = snapshot(outside)
    q = shlex.quote
    mounts = [
        # same filesystem (same st_dev): caught through /proc/self/mountinfo
        f"mount --bind {q(str(outside))} {q(str(root / 'kernel_meta' / 'mnt'))}",
        f"mount --bind {q(str(outside))} {q(str(root / 'rank_0' / 'graph_cache'))}",
        f"mount --bind {q(str(outside / 'x.log'))} {q(str(root / 'bound.log'))}",
        # another filesystem (st_dev differs), holding files that match rules
        f"mount -t tmpfs -o size=1m tmpfs {q(str(root / 'exp'))}",
        f"echo tmp > {q(str(root / 'exp' / 'on-tmpfs.log'))}",
    ]
    args = ["--root", str(root), "--no-progress", "--list"] + (["--dry-run"] if dry_run else [])
    done = clean_in_namespace(mounts, *args, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    out = done.stdout
    for line in ("skipped kernel_meta/mnt/: a mount point, not entered",
                 "skipped rank_0/graph_cache/: a mount point, not entered",
                 "skipped bound.log: a mount point, not removed",
                 "skipped exp/: another filesystem, not entered"):
        assert line in out, out
    assert "k.o" in out and "old.log" in out  # the rest of CODE/ is still cleaned
    assert "x.log" not in out and "w.ckpt" not in out and "on-tmpfs" not in out
    assert snapshot(outside) == before_outside
    assert (outside / "x.log").read_text() == "precious"
    assert (root / "kernel_meta" / "k.o").exists() == dry_run
    assert (root / "old.log").exists() == dry_run
    assert (root / "kernel_meta" / "mnt").is_dir()  # the mount point itself stays


def test_mountinfo_parsing_keeps_only_mounts_below_root(tmp_path, monkeypatch):
    table = tmp_path / "mountinfo"
    root = "/work/CODE"
    table.write_text(
        "22 27 0:21 / /proc rw - proc proc rw\n"
        f"90 27 8:1 /x {root} rw - ext4 /dev/vda rw\n"  # ROOT itself: its own filesystem
        f"91 90 8:1 /y {root}/kernel_meta/mnt rw - ext4 /dev/vda rw\n"
        f"92 90 0:50 / {root}/with\\040space rw - tmpfs tmpfs rw\n"
        f"93 27 0:51 / {root}2/other rw - tmpfs tmpfs rw\n")
    monkeypatch.setattr("platform_plugin.cleanup.mounts.MOUNTINFO", str(table))
    assert mount_points_below(root) == {("kernel_meta", "mnt"), ("with space",)}
    assert _unescape("a\\011b\\134c") == "a\tb\\c"


@needs_unshare
def test_a_read_only_code_folder_is_refused_once_and_a_dry_run_still_lists(tmp_path):
    """Before: exit 1 and one "could not remove ...: Read-only file system" line per file."""
    root = tmp_path / "CODE"
    write_tree(root, {"train.py": "", **{f"kernel_meta/k{i}.o": "1" for i in range(30)},
                      **{f"r{i}.log": "2" for i in range(30)}})
    before = snapshot(root)
    q = shlex.quote(str(root))
    read_only = [f"mount --bind {q} {q}", f"mount -o remount,ro,bind {q}"]
    done = clean_in_namespace(read_only, "--root", str(root), "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "[CLEAN_ROOT_READONLY]" in done.stderr and "could not remove" not in done.stdout
    dry = clean_in_namespace(read_only, "--root", str(root), "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "would remove logs    r29.log" in dry.stdout, dry.stdout
    assert snapshot(root) == before


def test_a_report_lists_at_most_20_errors_and_counts_the_rest(tmp_path):
    from platform_plugin.cleanup.report import CleanupReport

    errors = [f"r{i}.log: denied" for i in range(50)]
    report = CleanupReport(tmp_path, False, ("logs",), [], errors, 0.0)
    text = report.render()
    assert text.count("could not remove") == 20 and "... and 30 more left in place" in text
