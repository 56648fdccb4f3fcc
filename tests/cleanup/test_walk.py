"""Cleanup on real trees: symlinks pointing outside, protected files inside matched folders,
odd names. Exactly the expected set goes, and --dry-run lists exactly what a real run removes."""
from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_plugin.cleanup import run as cleanup
from platform_plugin.cleanup.run import CleanupRules, load_categories, run_cleanup

from tests.notebook.helpers import platform_run, snapshot, write_tree


def make_outside(tmp_path: Path) -> Path:
    """A folder outside ROOT that links point into: it must survive untouched."""
    outside = tmp_path / "outside"
    write_tree(outside, {"kernel_meta/precious.ckpt": "weights", "notes.log": "keep me"})
    return outside


def test_handmade_tree_exact_set(tmp_path):
    root = tmp_path / "CODE"
    outside = make_outside(tmp_path)
    write_tree(root, {
        "train.py": "print()", "nb.ipynb": "{}", ".env": "A=1", "platform.toml": "",
        "kernel_meta/op.o": "x" * 10, "kernel_meta/deep/op2.o": "y" * 5,
        "rank_0/graph_cache/g.bin": "g", "rank_0/logs/r.txt": "l", "rank_0/data.csv": "d",
        "device_0/train.py": "copy", "device_0/log.txt": "t", "device_0/sub/run.sh": "s",
        "device_0/sub/out.bin": "o", "sp ace.log": "1", "ünïcödé.ckpt": "22", "new\nline.ir": "3",
        "model-graph.meta": "m", ".git/objects/x.log": "git", "src/__pycache__/m.cpython.pyc": "c",
        "src/model.py": "code", "README.md": "# hi", "keep/kernel_meta.md": "doc",
        "notes.log.txt": "not a log", ".ipynb_checkpoints/nb-checkpoint.ipynb": "{}",
    })
    os.symlink(outside / "kernel_meta", root / "kernel_meta_link")  # name matches nothing
    os.symlink(outside / "kernel_meta", root / "rank_1")  # a link is never entered
    os.symlink(outside, root / "somas_meta")  # matches a dir rule: the link goes, not the target
    os.symlink(outside / "notes.log", root / "link.log")  # matches a file rule
    os.symlink(outside / "kernel_meta" / "precious.ckpt", root / "kernel_meta" / "w.ckpt")
    before_outside = snapshot(outside)

    dry = cleanup.clean(root, dry_run=True)
    planned = {(item.rel, item.kind) for item in dry.removed}
    assert planned == {
        ("kernel_meta", "dir"), ("rank_0/graph_cache", "dir"), ("rank_0/logs", "dir"),
        ("device_0/log.txt", "file"), ("device_0/sub/out.bin", "file"),
        ("sp ace.log", "file"), ("ünïcödé.ckpt", "file"), ("new\nline.ir", "file"),
        ("model-graph.meta", "file"), ("src/__pycache__", "dir"), ("somas_meta", "link"),
        ("link.log", "link"),
    }
    # .ipynb_checkpoints matches but only holds a notebook: nothing in it may go
    # kernel_meta: 2 files + 1 link; graph_cache, new\nline.ir, __pycache__: 1 each; somas_meta link
    assert dry.totals()["caches"] == (3 + 1 + 1 + 1 + 1, 10 + 5 + 1 + 1 + 1)
    assert snapshot(root) >= {rel for rel, _ in planned}  # a dry run removes nothing

    before = snapshot(root)
    real = cleanup.clean(root)
    assert not real.errors
    assert [(i.rel, i.kind) for i in real.removed] == [(i.rel, i.kind) for i in dry.removed]
    gone = before - snapshot(root)
    expected_gone = {rel for rel, _ in planned} | {
        "kernel_meta/op.o", "kernel_meta/deep", "kernel_meta/deep/op2.o", "kernel_meta/w.ckpt",
        "rank_0/graph_cache/g.bin", "rank_0/logs/r.txt", "src/__pycache__/m.cpython.pyc"}
    assert gone == expected_gone
    assert (root / "device_0" / "train.py").read_text() == "copy"
    assert (root / "device_0" / "sub" / "run.sh").exists()
    assert snapshot(outside) == before_outside
    assert (outside / "kernel_meta" / "precious.ckpt").read_text() == "weights"


def test_current_run_output_and_keep_survive_inside_matched_folders(tmp_path):
    root = tmp_path / "CODE"
    write_tree(root, {"nb.ipynb": "{}", "platform_logs/job-1/rank_0.log": "a",
                      "platform_logs/current/out.json": "now", "models/best.ckpt": "b",
                      "models/last.ckpt": "l", "pretrained/base.ckpt": "p"})
    (root / ".platformkeep").write_text("pretrained\n")
    report = cleanup.clean(root, keep=["best.ckpt"],
                           protect=[root / "platform_logs" / "current" / "out.json"])
    assert {i.rel for i in report.removed} == {"platform_logs/job-1", "models/last.ckpt"}
    assert (root / "platform_logs/current/out.json").exists()
    assert (root / "models/best.ckpt").exists() and (root / "pretrained/base.ckpt").exists()


def test_only_restricts_categories(tmp_path):
    root = tmp_path / "CODE"
    write_tree(root, {"a.py": "", "x.log": "", "m.ckpt": "", "kernel_meta/k": ""})
    report = cleanup.clean(root, only=["models"])
    assert [i.rel for i in report.removed] == ["m.ckpt"]
    assert set(report.totals()) == {"models"}
    assert (root / "x.log").exists() and (root / "kernel_meta/k").exists()


class SwapBeforeEntering(CleanupRules):
    """Simulates a race: the moment the walk decides about `exp/`, another process swaps it
    for a symlink to a folder outside ROOT."""

    def __init__(self, root: Path, outside: Path):
        super().__init__(load_categories())
        self.root, self.outside = root, outside

    def directory_category(self, parts):
        if parts == ("exp",) and not (self.root / "exp").is_symlink():
            shutil.rmtree(self.root / "exp")
            os.symlink(self.outside, self.root / "exp")
        return super().directory_category(parts)


def test_folder_swapped_for_a_symlink_during_the_walk_is_not_followed(tmp_path):
    root = tmp_path / "CODE"
    outside = make_outside(tmp_path)
    write_tree(root, {"a.py": "", "exp/kernel_meta/k": "", "exp/x.log": "", "y.log": ""})
    before_outside = snapshot(outside)
    report = run_cleanup(root, SwapBeforeEntering(root, outside))
    assert [i.rel for i in report.removed] == ["y.log"]
    assert len(report.errors) == 1 and report.errors[0].startswith("exp/: not entered")
    assert snapshot(outside) == before_outside


@contextlib.contextmanager
def unremovable(path: Path):
    """Make `path` impossible to unlink: an immutable file (root ignores permissions, so
    chmod alone would not do) or, for other users, a read-only parent folder."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(
                ["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available on this filesystem")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.parent.chmod(0o500)
        try:
            yield
        finally:
            path.parent.chmod(0o700)


def test_unremovable_entries_are_reported_and_the_rest_goes(tmp_path):
    root = tmp_path / "CODE"
    write_tree(root, {"a.py": "", "kernel_meta/locked/k.o": "1", "kernel_meta/free.o": "2",
                      "kernel_meta/more/m.o": "3"})
    with unremovable(root / "kernel_meta" / "locked" / "k.o"):
        report = cleanup.clean(root)
        assert (root / "kernel_meta" / "locked" / "k.o").exists()
    assert {i.rel for i in report.removed} == {"kernel_meta/free.o", "kernel_meta/more"}
    # one error, for the file: the folders above it are simply not removed (no rmdir noise)
    assert len(report.errors) == 1 and report.errors[0].startswith("kernel_meta/locked/k.o:")
    assert report.totals()["caches"] == (2, 2)


@pytest.mark.slow
def test_cli_clean_dry_run_then_real(tmp_path):
    root = tmp_path / "CODE"
    write_tree(root, {"train.py": "", "kernel_meta/a": "123", "w.ckpt": "4567"})
    project = root / "exp"
    project.mkdir()
    dry = platform_run("clean", "--dry-run", cwd=project)  # finds the CODE ancestor
    assert dry.returncode == 0, dry.stderr
    assert "would remove caches  kernel_meta/" in dry.stdout and "w.ckpt" in dry.stdout
    assert (root / "kernel_meta").exists()
    done = platform_run("clean", "--root", str(root), "--only", "caches", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "caches" in done.stdout and "removed in" in done.stdout
    assert not (root / "kernel_meta").exists() and (root / "w.ckpt").exists()
    refused = platform_run("clean", cwd=tmp_path)  # the parent of CODE/ is not a project
    assert refused.returncode == 2 and "CLEAN_ROOT_REFUSED" in refused.stderr


# ---------------------------------------------------------------- generated trees

DIR_NAMES = ["kernel_meta", "rank_0", "rank_12", "graph_cache", "logs", "device_3", "device_x",
             "__pycache__", ".git", "platform_logs", "src", "data dir", "ünï", "new\nline",
             "mlruns", "mlartifacts"]
FILE_NAMES = ["a.ckpt", "x.log", "worker_1.log", "g.ir", "train.py", "notes.md", "run.sh",
              ".env", "platform.toml", "nb.ipynb", "data.bin", "sp ace.onnx", "ü.mindir",
              "weird\nname.log", "weird\nname.py", "fusion_result.json", "keep.ckpt",
              "mlflow.db", "mlflow.db-wal", "rank_1.log"]
KINDS = ["file", "file", "file", "link-out-dir", "link-out-file", "link-in"]

entries = st.lists(st.tuples(st.lists(st.sampled_from(DIR_NAMES), max_size=3),
                             st.sampled_from(DIR_NAMES + FILE_NAMES), st.sampled_from(KINDS)),
                   min_size=1, max_size=25)


def build(root: Path, outside: Path, spec) -> dict[str, str]:
    """Create the tree; returns {rel: "file" | "link"} of the leaves actually created."""
    leaves: dict[str, str] = {}
    for dirs, name, kind in spec:
        parent = root.joinpath(*dirs)
        if any(root.joinpath(*dirs[:i]).is_symlink() for i in range(1, len(dirs) + 1)):
            continue  # would create the entry through a link, outside ROOT
        try:
            parent.mkdir(parents=True, exist_ok=True)
            target = parent / name
            if target.exists() or target.is_symlink():
                continue
            if kind == "file":
                target.write_text("data")
            else:
                os.symlink({"link-out-dir": outside / "kernel_meta", "link-out-file": outside /
                            "notes.log", "link-in": root}[kind], target)
        except (FileExistsError, NotADirectoryError):
            continue  # a name already used as a file or link: skip this entry
        leaves[target.relative_to(root).as_posix()] = "file" if kind == "file" else "link"
    return leaves


def expected_removed_leaves(leaves: dict[str, str], keep: list[str]) -> set[str]:
    """An independent oracle: plain fnmatch over the rule data, leaf by leaf."""
    categories = load_categories().values()
    dir_patterns = [p for c in categories for p in c.directories]
    file_patterns = [p for c in categories for p in c.files]

    def ends_with(parts, pattern):
        return len(parts) >= len(pattern) and all(
            fnmatch.fnmatchcase(n, g) for n, g in zip(parts[len(parts) - len(pattern):], pattern))

    def kept(parts):
        return any(fnmatch.fnmatchcase("/".join(parts[:i]), g) or
                   fnmatch.fnmatchcase(parts[i - 1], g)
                   for i in range(1, len(parts) + 1) for g in keep)

    removed = set()
    for rel, kind in leaves.items():
        parts = tuple(rel.split("/"))
        name = parts[-1]
        if ".git" in parts or kept(parts):
            continue
        # tracking stores, wherever they are: never entered, never deleted
        if any(p in ("mlruns", "mlartifacts") or p.startswith("mlflow.db") for p in parts):
            continue
        if name.endswith((".py", ".ipynb", ".sh", ".md")) or name in {".env", "platform.toml"}:
            continue
        in_matched_dir = any(ends_with(parts[:i], p) for i in range(1, len(parts))
                             for p in dir_patterns)
        own = any(ends_with(parts, p) for p in file_patterns) or (
            kind == "link" and any(ends_with(parts, p) for p in dir_patterns))
        if in_matched_dir or own:
            removed.add(rel)
    return removed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=entries, keep=st.lists(st.sampled_from(["keep.ckpt", "src", "rank_0/*"]), max_size=2))
def test_generated_trees_remove_exactly_the_expected_set(tmp_path_factory, spec, keep):
    base = tmp_path_factory.mktemp("tree")
    root, outside = base / "CODE", make_outside(base)
    root.mkdir()
    leaves = build(root, outside, spec)
    outside_before = snapshot(outside)

    dry = cleanup.clean(root, keep=keep, dry_run=True)
    before = snapshot(root)
    real = cleanup.clean(root, keep=keep)
    after = snapshot(root)

    assert snapshot(root) == after and not real.errors
    assert [(i.rel, i.kind, i.files) for i in real.removed] == \
        [(i.rel, i.kind, i.files) for i in dry.removed]  # dry run == real run
    gone_leaves = {rel for rel in leaves if rel in before and rel not in after}
    assert gone_leaves == expected_removed_leaves(leaves, keep)
    # what disappeared is exactly the planned items and what was inside them
    planned = {i.rel for i in dry.removed}
    assert before - after == {p for p in before - after
                              if any(p == r or p.startswith(r + "/") for r in planned)}
    assert planned <= before - after
    assert snapshot(outside) == outside_before
    shutil.rmtree(base)
