"""A real cleanup's locks (util/code_lock.py has the lock files and the job side).

Its root's `code` lock exclusively (no job or run works in it or below it); `below` shared on
every folder above the root, so a job starting in one of them refuses; and checks, while
holding those, that no job claims the `tree` of a folder above (the job works there and may
write anywhere below) and that no cleanup works in a folder above or below (two cleanups of
nested folders would remove the same files). Cleanups of folders apart never conflict.
"""
from __future__ import annotations

import os
from typing import Iterable

from platform_plugin.util.code_lock import RootLock, held_folders


class CleanupLock:
    """`take()` or raise CLEAN_ROOT_BUSY / CLEAN_LOCK_UNAVAILABLE holding nothing; `share()`
    when the cleanup is done and its full run goes on (the root's lock turned shared without a
    gap, the rest released); `release()`."""

    def __init__(self, root: str | os.PathLike, what: str) -> None:
        self.root = RootLock(root, what)
        self.above = [RootLock(folder, f"{what} of {root}", "below")
                      for folder in held_folders([root])[1:]]

    @classmethod
    def take(cls, root: str | os.PathLike, what: str = "a cleanup") -> CleanupLock:
        """A lock file that cannot be used refuses (CLEAN_LOCK_UNAVAILABLE): a job could not
        have taken it either, so the cleanup cannot see it. Every lock is taken before any check (a job takes its `tree` lock, then checks
        `below`; a nested cleanup takes `below`, then checks `code`): of two starting together,
        at least one sees the other."""
        lock = cls(root, what)
        try:
            lock.root.acquire(exclusive=True)
            for below in lock.above:
                below.acquire(exclusive=False, required=True)
            # none nested below; then above: no job's tree, no cleanup
            RootLock(root, f"{what} of {root}", "below").check_free(required=True)
            for below in lock.above:
                RootLock(below.root, below.what, "tree").check_free(required=True)
                RootLock(below.root, below.what).check_free(exclusive=False, required=True)
        except BaseException:
            lock.release()
            raise
        return lock

    def paths(self) -> Iterable[str | None]:
        """The lock files held (code_lock.JobHold.take(besides=) skips them)."""
        return [lock.path for lock in (self.root, *self.above)]

    def share(self) -> None:
        self.root.share()
        for below in self.above:
            below.release()
        self.above = []

    def release(self) -> None:
        for lock in (self.root, *self.above):
            lock.release()
        self.above = []
