"""Removing a matched folder's contents on a worker thread, and what the report says once the
removals are known.

The walk decides (scandir, protected names, the `lstat` for the byte count) and the worker
unlinks, in the order it was asked: a folder's files, then the folder itself, children before
parents. Both spend most of their time in system calls, which release the GIL, so on two
cores the decisions about one folder overlap with the removal of the previous one. The
worker gets a duplicate of the folder's descriptor (opened by the walk with O_NOFOLLOW and
checked for its filesystem), so it removes exactly where the walk decided, with the same
guarantees; the queue is bounded, which bounds the descriptors it holds.

A removal can fail (an immutable file, a permission): the folder and every folder above it
are then not removed as a whole and the report lists what did go, piece by piece. Since that
is only known once the worker is done, each matched folder leaves a `FolderOutcome` and the
report is resolved at the end, children before parents.
"""
from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field

QUEUE_DEPTH = 32  # folders waiting for the worker (each holds one duplicated descriptor)
LINK = -1  # in `sizes`: this piece is a symlink (reported as a link of 0 bytes)


@dataclass(frozen=True)
class Removal:
    """One removed (or, in a dry run, removable) item. `rel` is relative to ROOT, "/"-joined."""

    rel: str
    category: str
    kind: str  # "dir" (the whole tree) | "file" | "link"
    files: int  # files and links (a folder counts what was inside it)
    bytes: int  # apparent size (st_size) of those files; links count 0


@dataclass(eq=False)
class FolderOutcome:
    """One matched folder: what the walk planned, then what the worker could do."""

    rel: str
    category: str
    planned_whole: bool = True  # nothing in it had to stay, every subfolder planned whole too
    files: int = 0  # files and links planned to go, subfolders included
    bytes: int = 0
    names: list[str] = field(default_factory=list)  # files and links directly inside
    sizes: list[int] = field(default_factory=list)  # their st_size, LINK for a link
    children: list["FolderOutcome"] = field(default_factory=list)
    failed: set[str] = field(default_factory=set)  # names the worker could not unlink
    broken: bool = False  # something in it or below it stayed after all
    removals: list[Removal] = field(default_factory=list)  # resolved: what the report lists

    def resolve(self) -> None:
        """Fill `removals`; its children must be resolved already (post-order)."""
        if self.planned_whole and not self.broken:
            self.removals = [Removal(self.rel, self.category, "dir", self.files, self.bytes)]
        else:
            self.removals = [
                Removal(f"{self.rel}/{name}", self.category, "link" if size == LINK else "file",
                        1, max(size, 0))
                for name, size in zip(self.names, self.sizes) if name not in self.failed]
            for child in self.children:
                self.removals += child.removals
        self.children = []  # resolved: free the subtree


class Remover:
    """The worker thread. `close()` waits until every queued removal is done."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        self._jobs: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        self._thread = threading.Thread(target=self._work, name="cleanup-remover", daemon=True)
        self._thread.start()

    def unlink_all(self, dir_fd: int, outcome: FolderOutcome) -> None:
        self._jobs.put((os.dup(dir_fd), outcome, None))

    def rmdir(self, parent_fd: int, name: str, outcome: FolderOutcome) -> None:
        self._jobs.put((os.dup(parent_fd), outcome, name))

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fd, outcome, folder_name = job
            try:
                if folder_name is None:
                    self._unlink_all(fd, outcome)
                else:
                    self._rmdir(fd, folder_name, outcome)
            except Exception as exc:  # noqa: BLE001 - a dead worker would leave the walk waiting
                outcome.broken = True
                self.errors.append(f"{outcome.rel}/: {type(exc).__name__}: {exc}")
            finally:
                os.close(fd)

    def _unlink_all(self, fd: int, outcome: FolderOutcome) -> None:
        unlink = os.unlink
        for name in outcome.names:
            try:
                unlink(name, dir_fd=fd)
            except FileNotFoundError:
                continue  # gone since the walk listed it (another process): what we wanted
            except OSError as exc:
                outcome.failed.add(name)
                outcome.broken = True
                self.errors.append(f"{outcome.rel}/{name}: {exc.strerror or exc}")

    def _rmdir(self, parent_fd: int, name: str, outcome: FolderOutcome) -> None:
        # the children's jobs ran before this one (queued first): their result is final
        if outcome.broken or any(child.broken for child in outcome.children):
            outcome.broken = True  # not empty: no rmdir, no "Directory not empty" error
            return
        try:
            os.rmdir(name, dir_fd=parent_fd)
        except FileNotFoundError:
            return  # removed meanwhile by someone else: gone, as planned
        except OSError as exc:
            outcome.broken = True
            self.errors.append(f"{outcome.rel}/: {exc.strerror or exc}")
