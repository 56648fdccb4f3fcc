"""Walk a tree once to plan a cleanup, then delete exactly that plan.

Two functions, one job each:

- `plan_tree(root, matcher)` walks ROOT with `os.scandir` (never following a symlink) and
  returns the `Removal`s: whole directories when nothing inside them must stay, single
  files and links otherwise. It deletes nothing, so `--dry-run` shows the real plan.
- `delete(root, removals)` removes those items through directory file descriptors opened
  with O_NOFOLLOW, so a directory swapped for a symlink between planning and deleting
  makes the delete fail instead of reaching outside ROOT (the same guard `rm -rf` and
  `shutil.rmtree` use on Linux).

A matched directory that holds protected or kept files (a `device_0/` copy of `train.py`,
say) is not removed as a whole: everything else inside it is, the protected files and the
folders leading to them stay.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Removal:
    """One planned deletion. `rel` is relative to ROOT, with "/" separators."""

    rel: str
    category: str
    kind: str  # "dir" (the whole tree) | "file" | "link"
    files: int  # files and links removed (a directory counts what is inside it)
    bytes: int  # apparent size (st_size) of those files; links count 0


class Matcher(Protocol):
    """What the walk asks about each entry (implemented by `cleanup.CleanupRules`)."""

    def directory_category(self, parts: tuple[str, ...]) -> str | None: ...
    def file_category(self, parts: tuple[str, ...]) -> str | None: ...
    def link_category(self, parts: tuple[str, ...]) -> str | None: ...
    def must_stay(self, parts: tuple[str, ...]) -> bool: ...
    def is_protected_name(self, name: str) -> bool: ...
    def never_enter(self, name: str) -> bool: ...


@dataclass
class _Subtree:
    """Result of planning inside a matched directory."""

    whole: bool  # nothing inside must stay: delete the directory itself
    files: int
    bytes: int
    removals: list[Removal]  # only filled when not `whole`


def plan_tree(root: Path, matcher: Matcher) -> list[Removal]:
    removals: list[Removal] = []
    _plan_unmatched(str(root), (), matcher, removals)
    return sorted(removals, key=lambda item: item.rel)


def _plan_unmatched(path: str, parts: tuple[str, ...], matcher: Matcher,
                    out: list[Removal]) -> None:
    """Outside any matched directory: look for matches, descend into the rest."""
    with os.scandir(path) as entries:
        children = list(entries)
    for entry in children:
        child = parts + (entry.name,)
        rel = "/".join(child)
        if matcher.never_enter(entry.name) or matcher.must_stay(child):
            continue
        if entry.is_symlink():
            category = matcher.link_category(child)
            if category:
                out.append(Removal(rel, category, "link", 1, 0))
        elif entry.is_dir(follow_symlinks=False):
            category = matcher.directory_category(child)
            if category is None:
                _plan_unmatched(entry.path, child, matcher, out)
                continue
            sub = _plan_matched(entry.path, child, category, matcher)
            if sub.whole:
                out.append(Removal(rel, category, "dir", sub.files, sub.bytes))
            else:
                out.extend(sub.removals)
        else:
            category = matcher.file_category(child)
            if category:
                size = entry.stat(follow_symlinks=False).st_size
                out.append(Removal(rel, category, "file", 1, size))


def _plan_matched(path: str, parts: tuple[str, ...], category: str,
                  matcher: Matcher) -> _Subtree:
    """Inside a matched directory everything goes, except what must stay."""
    files = size = 0
    whole = True
    pieces: list[Removal] = []
    with os.scandir(path) as entries:
        for entry in entries:
            child = parts + (entry.name,)
            if matcher.never_enter(entry.name) or matcher.must_stay(child):
                whole = False
                continue
            rel = "/".join(child)
            if entry.is_dir(follow_symlinks=False):
                sub = _plan_matched(entry.path, child, category, matcher)
                if sub.whole:
                    pieces.append(Removal(rel, category, "dir", sub.files, sub.bytes))
                else:
                    whole = False
                    pieces.extend(sub.removals)
                files += sub.files
                size += sub.bytes
            elif entry.is_symlink():
                pieces.append(Removal(rel, category, "link", 1, 0))
                files += 1
            else:
                nbytes = entry.stat(follow_symlinks=False).st_size
                pieces.append(Removal(rel, category, "file", 1, nbytes))
                files += 1
                size += nbytes
    if whole:
        return _Subtree(True, files, size, [])
    return _Subtree(False, files, size, pieces)


# ---------------------------------------------------------------- deleting

@dataclass
class DeleteOutcome:
    removed: list[Removal]
    errors: list[str]  # "rel: reason" for items that could not be removed (left in place)


def delete(root: Path, removals: list[Removal], matcher: Matcher,
           progress: Callable[[int], None] | None = None) -> DeleteOutcome:
    removed: list[Removal] = []
    errors: list[str] = []
    parents = _ParentDirs(root)
    try:
        for item in removals:
            *parent_parts, name = item.rel.split("/")
            try:
                parent_fd = parents.open(tuple(parent_parts))
                if item.kind == "dir":
                    _remove_tree(parent_fd, name, matcher, progress)
                else:
                    _remove_entry(parent_fd, name, item.kind)
                    if progress:
                        progress(1)
            except OSError as exc:
                errors.append(f"{item.rel}: {exc.strerror or exc}")
                continue
            removed.append(item)
    finally:
        parents.close()
    return DeleteOutcome(removed, errors)


def _remove_entry(parent_fd: int, name: str, kind: str) -> None:
    """Unlink a planned file or link, refusing one that turned into a directory."""
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, f"planned as a {kind}, now a directory: left in place")
    os.unlink(name, dir_fd=parent_fd)


def _remove_tree(parent_fd: int, name: str, matcher: Matcher,
                 progress: Callable[[int], None] | None) -> None:
    """`rm -rf` through file descriptors. Re-checks protected names in case the tree
    changed after planning; a directory that still holds one stays."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    kept = False
    try:
        count = 0
        with os.scandir(fd) as entries:
            for entry in entries:
                if matcher.never_enter(entry.name):
                    kept = True
                elif entry.is_dir(follow_symlinks=False):
                    _remove_tree(fd, entry.name, matcher, progress)
                elif matcher.is_protected_name(entry.name):
                    kept = True
                else:
                    os.unlink(entry.name, dir_fd=fd)
                    count += 1
        if progress and count:
            progress(count)
    finally:
        os.close(fd)
    if not kept:
        try:
            os.rmdir(name, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno != 39:  # ENOTEMPTY: something protected stayed further down
                raise


class _ParentDirs:
    """Directory fds below ROOT, each opened component by component with O_NOFOLLOW."""

    def __init__(self, root: Path):
        self._fds: dict[tuple[str, ...], int] = {(): os.open(root, _DIR_FLAGS)}

    def open(self, parts: tuple[str, ...]) -> int:
        fd = self._fds.get(parts)
        if fd is None:
            parent = self.open(parts[:-1])
            fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
            self._fds[parts] = fd
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
