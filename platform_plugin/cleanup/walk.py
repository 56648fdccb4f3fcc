"""One walk that plans a cleanup and, unless it is a dry run, carries it out.

Every folder is read and every entry in it decided (remove or keep) before anything in it
is removed, and the decisions never depend on whether removing is switched on — so
`--dry-run` (removing off) lists exactly what a real run removes, and a real run reads the
tree once instead of twice.

Safety comes from how the tree is opened: every folder is opened relative to its parent's
file descriptor with O_NOFOLLOW, so a symlink is never followed — not at the start, and not
when a folder is swapped for a link while the walk runs — and nothing outside ROOT is
reachable (the same guard `rm -rf` and `shutil.rmtree` use on Linux). A folder on another
filesystem (`st_dev` differs from ROOT's) or listed as a mount point is never entered: it is
reported as skipped.

The walk is iterative (a tree 100,000 levels deep is fine): each folder is a generator that
yields the subfolders it wants visited; the driver keeps at most FD_WINDOW of their
descriptors open and reopens a parent through its child's ".." (checked by device and inode)
when it gets back to it.

A matched folder is removed wholesale: no rule is tested inside it, only the protected names
(and keeps) that must stay wherever they are. One that holds something that must stay (a
`device_0/` copy of `train.py`, say) is not removed as a whole: everything else inside it is,
and the protected files and the folders leading to them stay.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generator, Protocol

from platform_plugin.cleanup.mounts import mount_points_below
from platform_plugin.cleanup.remover import LINK, FolderOutcome, Removal, Remover
from platform_plugin.cleanup.tracking_data import spool_hold
from platform_plugin.errors import ConfigError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
FD_WINDOW = 64  # folder descriptors kept open at most, whatever the depth
_SPOOL_HINTS = ("sink.json", "tracking", "rank_")  # names that may make a folder a spool


class Matcher(Protocol):
    """What the walk asks about each entry (implemented by `cleanup.rules.CleanupRules`)."""

    @property
    def checks_paths(self) -> bool: ...

    def stays_by_name(self, name: str) -> bool: ...
    def names_that_stay(self, names: list[str]) -> set[str]: ...
    def stays_by_path(self, rel: str) -> bool: ...
    def directory_category(self, parts: tuple[str, ...]) -> str | None: ...
    def file_category(self, parts: tuple[str, ...]) -> str | None: ...
    def link_category(self, parts: tuple[str, ...]) -> str | None: ...


@dataclass
class WalkResult:
    removals: list[Removal] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "rel: reason", left in place
    skipped: list[str] = field(default_factory=list)  # "rel/: another filesystem", not entered
    kept: list[str] = field(default_factory=list)  # "rel/: why" (tracking data), kept whole


@dataclass(eq=False)
class _Folder:
    name: str
    parts: tuple[str, ...]
    fd: int | None  # None while closed to bound open descriptors
    dev: int
    ino: int
    entries: list[os.DirEntry]

    @property
    def rel(self) -> str:
        return "/".join(self.parts)


@dataclass(frozen=True)
class _Visit:
    """A folder's request to the driver: enter this subfolder (as matched when `category`)."""

    name: str
    parts: tuple[str, ...]
    category: str | None


class _Moved(Exception):
    """A folder is no longer where the walk left it: stop rather than guess."""


Visitor = Generator[_Visit, "FolderOutcome | None", "FolderOutcome | None"]


def walk(root: Path, matcher: Matcher, *, remove: bool,
         progress: Callable[[int], None] | None = None) -> WalkResult:
    """Plan (remove=False) or plan-and-remove (remove=True) below ROOT."""
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise ConfigError(f"cleanup root {root} cannot be opened as a folder ({exc.strerror}); "
                          f"it must be a real folder, not a symlink", code="CLEAN_ROOT")
    cleaning = _Walk(root, matcher, remove, progress)
    top = _Folder("", (), root_fd, 0, 0, [])
    try:  # from the worker's start on, whatever happens (Ctrl-C), it is reaped, ROOT closed
        cleaning.start()
        stat = os.fstat(root_fd)
        top.dev, top.ino = stat.st_dev, stat.st_ino
        cleaning.dev = stat.st_dev  # the one filesystem the walk may touch
        top.entries = _read(root_fd)
        cleaning.drive(top)
    except _Moved as exc:
        cleaning.result.errors.append(f"{exc}: the cleanup stopped there")
    except OSError as exc:
        cleaning.result.errors.append(f"./: not read ({exc.strerror or exc})")
    finally:
        _close(top)
        if cleaning.remover is not None:
            cleaning.remover.close()  # every queued removal done: outcomes are final
    return cleaning.report()


class _Walk:
    def __init__(self, root: Path, matcher: Matcher, remove: bool,
                 progress: Callable[[int], None] | None):
        self.root, self.matcher, self.remove, self.progress = root, matcher, remove, progress
        self.result = WalkResult()
        self.remover = Remover(self.result.errors) if remove else None
        self.dev = 0
        self.mounts: frozenset[tuple[str, ...]] = frozenset()
        self.mount_parents: frozenset[tuple[str, ...]] = frozenset()
        self.finished: list[FolderOutcome] = []  # matched folders, children before parents

    def start(self) -> None:
        if self.remover is not None:
            self.remover.start()  # its interpreter starts while this one reads mounts, ROOT
        self.mounts = mount_points_below(str(self.root))
        self.mount_parents = frozenset(parts[:-1] for parts in self.mounts)

    def report(self) -> WalkResult:
        """Resolve the matched folders once the remover is done. The outermost ones (found
        outside any match; or whose parent never finished, when the walk stopped) are what
        the report lists."""
        inner = {id(child) for outcome in self.finished for child in outcome.children}
        outermost = [outcome for outcome in self.finished if id(outcome) not in inner]
        for outcome in self.finished:
            outcome.resolve()
        for outcome in outermost:
            self.result.removals += outcome.removals
        self.result.removals.sort(key=lambda item: item.rel)
        self.result.errors.sort()
        return self.result

    # ---------------------------------------------------------------- the driver
    def drive(self, top: _Folder) -> None:
        stack: list[tuple[Visitor, _Folder]] = [(self.unmatched(top), top)]
        reply: FolderOutcome | None = None
        try:
            while stack:
                visitor, folder = stack[-1]
                try:
                    request = visitor.send(reply)
                except StopIteration as done:
                    stack.pop()
                    reply = done.value
                    try:
                        if stack:
                            self._back_to(stack[-1][1], folder)
                            if reply is not None and reply.planned_whole and self.remover:
                                self.remover.rmdir(stack[-1][1].fd, folder.name, reply)
                    finally:
                        _close(folder)
                    continue
                reply = None
                child = self._enter(folder, request)
                if child is None:
                    continue  # the parent hears None: not entered
                visitor = (self.matched(child, request.category) if request.category
                           else self.unmatched(child))
                stack.append((visitor, child))
                if len(stack) > FD_WINDOW:
                    _close(stack[-FD_WINDOW - 1][1])
        finally:
            for _, folder in stack:
                _close(folder)

    def _enter(self, parent: _Folder, visit: _Visit) -> _Folder | None:
        rel = "/".join(visit.parts)
        try:
            fd = os.open(visit.name, _DIR_FLAGS, dir_fd=parent.fd)
        except OSError as exc:  # e.g. ELOOP: swapped for a symlink since it was listed
            self.result.errors.append(f"{rel}/: not entered ({exc.strerror or exc})")
            return None
        folder = None
        try:
            stat = os.fstat(fd)
            if stat.st_dev != self.dev or visit.parts in self.mounts:
                what = "another filesystem" if stat.st_dev != self.dev else "a mount point"
                self.result.skipped.append(f"{rel}/: {what}, not entered")
                return None
            folder = _Folder(visit.name, visit.parts, fd, stat.st_dev, stat.st_ino, _read(fd))
            hold = self._spool_hold(folder)
            if hold:
                self.result.kept.append(f"{rel}/: {hold}")
                folder = None
            return folder
        except OSError as exc:
            self.result.errors.append(f"{rel}/: not read ({exc.strerror or exc})")
            return None
        finally:
            if folder is None:
                os.close(fd)

    def _spool_hold(self, folder: _Folder) -> str | None:
        # names never hold "\0": three substring searches say whether any name starts with
        # a hint (every folder is asked, 100,000 names in a big cleanup)
        joined = "\0" + "\0".join(entry.name for entry in folder.entries)
        if any(f"\0{hint}" in joined for hint in _SPOOL_HINTS):
            return spool_hold(self.root.joinpath(*folder.parts), folder.entries)
        return None

    def _back_to(self, parent: _Folder, child: _Folder) -> None:
        """Reopen `parent` (closed to bound descriptors) through `child`'s "..", refusing a
        folder that is not the one the walk left (moved or swapped meanwhile)."""
        if parent.fd is not None:
            return
        fd = os.open("..", _DIR_FLAGS, dir_fd=child.fd)
        stat = os.fstat(fd)
        if (stat.st_dev, stat.st_ino) != (parent.dev, parent.ino):
            os.close(fd)
            raise _Moved(f"{parent.rel or '.'}/ moved while it was cleaned")
        parent.fd = fd

    # ---------------------------------------------------------------- the visitors
    def unmatched(self, folder: _Folder) -> Visitor:
        """Outside any matched folder: look for matches, descend into the rest."""
        matcher, removals = self.matcher, self.result.removals
        for entry in folder.entries:
            name = entry.name
            child = folder.parts + (name,)
            rel = "/".join(child)
            if matcher.stays_by_name(name) or (matcher.checks_paths
                                               and matcher.stays_by_path(rel)):
                continue
            if entry.is_symlink():
                category = matcher.link_category(child)
                if category and self._unlink(folder.fd, name, rel):
                    removals.append(Removal(rel, category, "link", 1, 0))
            elif entry.is_dir(follow_symlinks=False):
                category = matcher.directory_category(child)
                yield _Visit(name, child, category)  # a matched one reports at the end
            else:
                category = matcher.file_category(child)
                if category and not self._mounted(child, rel):
                    size = _size(entry)
                    if self._unlink(folder.fd, name, rel):
                        removals.append(Removal(rel, category, "file", 1, size))
        return None

    def matched(self, folder: _Folder, category: str) -> Visitor:
        """Inside a matched folder everything goes except what must stay. The hot loop of a
        big cleanup, so whole-folder steps (list comprehensions, a few substring searches
        over the folder's joined names, one lstat per file for the byte count); the unlinks
        go to the remover process as one job per folder, after the subfolders' jobs."""
        outcome = FolderOutcome(folder.rel, category)
        subfolders, pieces = self._split(folder, outcome)
        for entry in subfolders:
            child = yield _Visit(entry.name, folder.parts + (entry.name,), category)
            if child is None:
                outcome.planned_whole = False
                continue
            outcome.children.append(child)
            outcome.files += child.files
            outcome.bytes += child.bytes
            outcome.planned_whole = outcome.planned_whole and child.planned_whole
        if pieces:
            outcome.names = [entry.name for entry in pieces]
            outcome.sizes = _sizes(pieces)
            outcome.files += len(pieces)
            outcome.bytes += sum(size for size in outcome.sizes if size > 0)
            if self.remover is not None:
                self.remover.unlink_all(folder.fd, outcome)  # the folder is open: running
            if self.progress:
                self.progress(len(pieces))
        self.finished.append(outcome)
        return outcome

    def _split(self, folder: _Folder,
               outcome: FolderOutcome) -> tuple[list[os.DirEntry], list[os.DirEntry]]:
        """A matched folder's entries that go: (subfolders, files and links). What must stay
        (protected names, keeps, bind-mounted files) is left out and makes the folder not
        removable as a whole."""
        matcher, entries = self.matcher, folder.entries
        stay = matcher.names_that_stay([entry.name for entry in entries])
        if matcher.checks_paths:
            prefix = folder.rel + "/"
            stay.update(entry.name for entry in entries
                        if matcher.stays_by_path(prefix + entry.name))
        if stay:
            outcome.planned_whole = False
            entries = [entry for entry in entries if entry.name not in stay]
        subfolders = [entry for entry in entries if entry.is_dir(follow_symlinks=False)]
        pieces = ([entry for entry in entries if not entry.is_dir(follow_symlinks=False)]
                  if subfolders else entries)
        if folder.parts in self.mount_parents:
            mounted = [entry for entry in pieces
                       if self._mounted(folder.parts + (entry.name,), f"{folder.rel}/{entry.name}")]
            if mounted:
                outcome.planned_whole = False
                pieces = [entry for entry in pieces if entry not in mounted]
        return subfolders, pieces

    # ---------------------------------------------------------------- touching the tree
    def _mounted(self, parts: tuple[str, ...], rel: str) -> bool:
        """A bind-mounted file: never unlinked (the kernel would refuse anyway)."""
        if parts in self.mounts:
            self.result.skipped.append(f"{rel}: a mount point, not removed")
            return True
        return False

    def _unlink(self, dir_fd: int | None, name: str, rel: str) -> bool:
        return self._apply(os.unlink, dir_fd, name, rel)

    def _apply(self, remove: Callable[..., None], dir_fd: int | None, name: str,
               shown: str) -> bool:
        if not self.remove:
            return True  # a dry run answers "done" without touching anything
        try:
            remove(name, dir_fd=dir_fd)
            return True
        except FileNotFoundError:
            return True  # gone since it was listed (another process): not a failure
        except OSError as exc:
            self.result.errors.append(f"{shown}: {exc.strerror or exc}")
            return False


def _size(entry: os.DirEntry) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except OSError:
        return 0  # gone since it was listed: nothing left to remove


def _sizes(pieces: list[os.DirEntry]) -> list[int]:
    """st_size of each file (LINK for a symlink), one comprehension for the whole folder;
    one that vanished since it was listed counts 0 (the rare slow path)."""
    try:
        return [LINK if entry.is_symlink() else entry.stat(follow_symlinks=False).st_size
                for entry in pieces]
    except OSError:
        return [LINK if entry.is_symlink() else _size(entry) for entry in pieces]


def _close(folder: _Folder) -> None:
    if folder.fd is not None:
        os.close(folder.fd)
        folder.fd = None


def _read(fd: int) -> list[os.DirEntry]:
    """All entries first: a folder is fully decided before anything in it is removed."""
    with os.scandir(fd) as entries:
        return list(entries)
