"""Hostile roots and trees: a symlinked ROOT, ROOT above HOME, a tree 1,000 levels deep, and
`.platformkeep` files that are not keep lists. Each is a clean refusal (exit 2, a code, no
traceback, nothing removed) or a complete cleanup."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from platform_plugin.cleanup import run as cleanup
from platform_plugin.cleanup import walk as walk_module
from platform_plugin.cleanup.run import find_root
from platform_plugin.errors import ConfigError

from tests.helpers import clean_env
from tests.notebook.helpers import platform_run, snapshot, write_tree

DEPTH = 1000  # the recursive walk died with RecursionError at ~330 levels


def code_code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.problems[0].code


def test_symlinked_root_is_refused_and_names_its_target(tmp_path):
    real = tmp_path / "real"
    write_tree(real, {"train.py": "", "x.log": "1"})
    link = tmp_path / "CODE"
    link.symlink_to(real)
    for how in ({"explicit": link}, {"explicit": str(link) + "/"},
                {"environ": {"PLATFORM_CODE_DIR": str(link)}}):
        with pytest.raises(ConfigError, match=f"symlink to {real}") as info:
            find_root(how.get("explicit"), environ=how.get("environ", {}))
        assert code_code(info) == "CLEAN_ROOT_SYMLINK"
    assert find_root(real, environ={}) == real  # the target itself, named, is fine
    done = platform_run("clean", "--root", str(link), cwd=tmp_path)
    assert done.returncode == 2 and "CLEAN_ROOT_SYMLINK" in done.stderr
    assert "Traceback" not in done.stderr and (real / "x.log").exists()


def test_symlinks_above_root_are_resolved_and_the_report_names_the_real_folder(tmp_path):
    write_tree(tmp_path / "disk" / "CODE", {"train.py": "", "x.log": "1"})
    (tmp_path / "work").symlink_to(tmp_path / "disk")
    root = find_root(tmp_path / "work" / "CODE", environ={})
    assert root == tmp_path / "disk" / "CODE"
    assert cleanup.clean(root).render().startswith(f"cleanup of {root} (done)")


@pytest.mark.parametrize("level", ["home", "parent", "grandparent"])
def test_home_and_every_folder_above_it_are_refused(tmp_path, monkeypatch, level):
    home = tmp_path / "users" / "me"
    write_tree(home, {"train.py": "", "x.log": "1"})
    monkeypatch.setenv("HOME", str(home))
    target = {"home": home, "parent": home.parent, "grandparent": tmp_path}[level]
    with pytest.raises(ConfigError, match="home folder") as info:
        find_root(target, environ={})
    assert code_code(info) == "CLEAN_ROOT_REFUSED"
    done = platform_run("clean", "--root", str(target), cwd=tmp_path,
                        env=clean_env(HOME=str(home)))
    assert done.returncode == 2 and "CLEAN_ROOT_REFUSED" in done.stderr
    assert (home / "x.log").exists()


def make_deep(base: Path, depth: int, leaf_files: dict[str, str]) -> None:
    """A chain of `depth` folders named `d` below `base`, built relative to descriptors (the
    full path is longer than most tools accept in one piece)."""
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            fd_next = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = fd_next
        for name, text in leaf_files.items():
            leaf = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(leaf, text.encode())
            os.close(leaf)
    finally:
        os.close(fd)


def deep_exists(base: Path, depth: int, name: str) -> bool:
    rel = "/".join(["d"] * depth + [name])
    return os.path.lexists(os.path.join(base, rel))


@pytest.fixture
def deep_root(tmp_path):
    """CODE/ for deep trees; removed with rm -rf afterwards (pytest's own cleanup recurses)."""
    root = tmp_path / "CODE"
    yield root
    subprocess.run(["rm", "-rf", str(root)], check=True)


def test_a_tree_1000_levels_deep_is_cleaned_completely(deep_root):
    root = deep_root
    write_tree(root, {"train.py": ""})
    make_deep(root / "src", DEPTH, {"deep.log": "1", "keep.py": "2", "w.ckpt": "3"})
    make_deep(root / "kernel_meta", DEPTH, {"k.o": "44", "also.py": "5"})
    make_deep(root / "__pycache__", DEPTH, {"m.pyc": "666"})
    assert walk_module.FD_WINDOW < DEPTH  # the walk has to reopen parents through ".."

    dry = cleanup.clean(root, dry_run=True)
    real = cleanup.clean(root)
    assert not real.errors and not dry.errors
    assert [(i.rel, i.kind, i.files, i.bytes) for i in real.removed] == \
        [(i.rel, i.kind, i.files, i.bytes) for i in dry.removed]
    deep = "/".join(["d"] * DEPTH)
    assert {(i.rel, i.kind) for i in real.removed} == {
        (f"src/{deep}/deep.log", "file"), (f"src/{deep}/w.ckpt", "file"),
        (f"kernel_meta/{deep}/k.o", "file"), ("__pycache__", "dir")}
    assert real.totals()["caches"] == (2, 5)
    assert deep_exists(root / "src", DEPTH, "keep.py")
    assert deep_exists(root / "kernel_meta", DEPTH, "also.py")  # protected inside a match
    assert not deep_exists(root / "src", DEPTH, "deep.log")
    assert not (root / "__pycache__").exists()


def test_a_folder_moved_while_its_descriptor_was_closed_stops_the_walk(tmp_path, monkeypatch):
    """With a window of 2 descriptors, the walk reopens `a/` through `a/b/c/..`; moving `a/b`
    elsewhere meanwhile makes that a different folder: the walk stops instead of going on."""
    root = tmp_path / "CODE"
    write_tree(root, {"train.py": "", "a/b/c/x.log": "1", "away/.keep": ""})
    monkeypatch.setattr(walk_module, "FD_WINDOW", 2)
    rules = cleanup.CleanupRules.load(root)
    original = rules.file_category

    def moving(parts):
        if parts == ("a", "b", "c", "x.log"):
            os.rename(root / "a" / "b", root / "away" / "b")
        return original(parts)

    monkeypatch.setattr(rules, "file_category", moving)
    report = cleanup.run_cleanup(root, rules)
    assert any("a/ moved while it was cleaned" in e for e in report.errors), report.errors


@pytest.mark.parametrize("kind", ["folder", "invalid-utf8", "dev-zero-link", "fifo", "huge"])
def test_a_platformkeep_that_is_not_a_keep_list_is_a_clean_refusal(tmp_path, kind):
    root = tmp_path / "CODE"
    write_tree(root, {"train.py": "", "x.log": "1", "w.ckpt": "2"})
    keep = root / ".platformkeep"
    if kind == "folder":
        keep.mkdir()
    elif kind == "invalid-utf8":
        keep.write_bytes(b"*.ckpt\n\xff\xfe bad\n")
    elif kind == "dev-zero-link":
        keep.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(keep)  # opening it for reading must not block
    else:
        keep.write_bytes(b"# comment\n" * 200_000)  # 2 MiB
    with pytest.raises(ConfigError) as info:
        cleanup.clean(root)
    assert code_code(info) == "CLEAN_KEEP_FILE"
    before = snapshot(root)
    done = platform_run("clean", "--root", str(root), cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "CLEAN_KEEP_FILE" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(root) == before  # nothing removed


def test_a_platformkeep_link_to_a_regular_keep_list_is_read(tmp_path):
    root = tmp_path / "CODE"
    write_tree(root, {"train.py": "", "w.ckpt": "2", "x.log": "1"})
    (tmp_path / "shared-keep").write_text("*.ckpt\n")
    (root / ".platformkeep").symlink_to(tmp_path / "shared-keep")
    assert [i.rel for i in cleanup.clean(root).removed] == ["x.log"]


def test_files_and_folders_that_vanish_before_their_removal_are_not_failures(tmp_path):
    """Another process removed them between the walk's listing and the worker's unlink: the
    goal (gone) is met - before, each was 'could not remove ...: No such file or directory',
    the folder stayed 'broken' and the command exited 1."""
    from platform_plugin.cleanup.remover import FolderOutcome, Remover

    cache = tmp_path / "kernel_meta"
    cache.mkdir()
    (cache / "a.o").write_text("x")
    listed = FolderOutcome("kernel_meta", "caches", names=["a.o", "vanished.o"])
    errors: list[str] = []
    remover = Remover(errors)
    folder_fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY)
    parent_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remover.unlink_all(folder_fd, listed)
        remover.rmdir(parent_fd, "kernel_meta", listed)
        gone = FolderOutcome("rank_0/graph_cache", "caches")  # its folder vanished too
        remover.rmdir(parent_fd, "graph_cache", gone)
        remover.close()
    finally:
        os.close(folder_fd)
        os.close(parent_fd)
    assert errors == [] and not listed.broken and not gone.broken
    assert not cache.exists()
