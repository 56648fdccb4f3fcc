"""A real cleanup's locks (folder_locks/protocol.py has the lock files and the job side).

Its root's `code` lock exclusively (no job or run works in it or below it); `below` shared on
every folder above the root, so a job starting in one of them refuses; and checks, while
holding those, that no job claims the `tree` of a folder above (the job works there and may
write anywhere below) and that no cleanup works in a folder above or below (two cleanups of
nested folders would remove the same files). Cleanups of folders apart never conflict.

A full run cleans holding its root exclusively, then turns that into a shared hold for its
notebook (`GatedLock.share`). flock(2) does not promise that without a gap ("the existing lock
is first removed, and then a new lock is established"): a cleanup could get the lock in
between. So the run holds a gate file meanwhile, and an exclusive lock just got is used only
while nobody holds the gate (`GatedLock._admitted`); else the cleanup refuses.
"""
from __future__ import annotations

import fcntl
import os
import time
from typing import Iterable

from platform_plugin.errors import ConfigError
from platform_plugin.folder_locks import lost
from platform_plugin.folder_locks.protocol import (BUSY_TRIES, BUSY_WAIT_S, LockUnavailable,
                                                   RootLock, busy, held_folders, lock_dir,
                                                   nobody_holds, open_lock, still_at)

GATE = ".gate"  # held by a full run while it turns its exclusive lock into a shared one


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class GatedLock(RootLock):
    """A cleanup's lock of its root: not used in the instant of a full run's hand-over, and
    handed over without a gap (`share`). Only a process holding this lock exclusively touches
    its gate: anything there that a full run does not hold (a killed run's gate, something
    planted) is junk, removed."""

    def _admitted(self, path: str) -> bool:
        try:
            return nobody_holds(path + GATE) is None
        except LockUnavailable:
            _remove(path + GATE)
            return True

    def share(self) -> None:
        """Exclusive to shared, the gate held meanwhile (see the module's docstring)."""
        if self.fd < 0 or self.path is None:
            return
        gate = self.path + GATE
        gate_fd = self._take_gate(gate)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_SH)
        finally:
            if gate_fd >= 0:
                _remove(gate)
                os.close(gate_fd)

    @staticmethod
    def _take_gate(gate: str) -> int:
        """The gate's descriptor, locked exclusively; -1 if it cannot be had (convert
        without)."""
        for _ in range(3):
            try:
                fd = open_lock(gate, create=True)
            except LockUnavailable:
                _remove(gate)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                break
            if still_at(fd, gate):  # (not removed meanwhile by `sweep_leftovers`)
                return fd
            os.close(fd)
        return -1


def sweep_leftovers() -> int:
    """Remove the lock files nobody holds; returns how many. A holder killed by SIGKILL leaves
    its files, which only the next holder of the same folder removes - for a folder never
    locked again, nobody. Safe at any time: every holder checks, once its flock is granted,
    that its file is still at its path (else it opens anew)."""
    try:
        folder = lock_dir()
        names = os.listdir(folder)
    except (LockUnavailable, OSError):
        return 0
    removed = 0
    for name in names:
        path = os.path.join(folder, name)
        try:
            removed += nobody_holds(path, tries=0) is None  # (held: left alone, no waiting)
        except (LockUnavailable, OSError):  # planted (the cleanup of its folder says so and
            pass  # refuses) or removed meanwhile by its last holder
    return removed


def refuse_deleted_holds(locks: list[tuple[RootLock, bool]]) -> None:
    """CLEAN_ROOT_BUSY when a process still holds one of these locks on a file that was
    deleted under it (folder_locks/lost.py: a /tmp cleaner, a user's rm): the new file this
    cleanup locked or found free does not show it. (lock, exclusive): as in check_free."""
    wanted = {lock.path: exclusive for lock, exclusive in locks if lock.path}
    found = lost.deleted_holds(wanted)
    for _ in range(BUSY_TRIES):  # a last holder unlinks its file, then closes it: an instant
        if not found:
            return
        time.sleep(BUSY_WAIT_S)
        found = lost.deleted_holds(wanted)
    for path, pid, holder in found:
        lock = next(lock for lock, _ in locks if lock.path == path)
        raise busy(lock.kind, lock.root, lock.what, f"{holder}; its lock file was deleted under "
                   f"it, pid {pid} still holds it", exclusive=wanted[path])


def refuse_earlier_versions(root: str | os.PathLike) -> None:
    """Versions before the lock folder kept a folder's `code` lock in $TMPDIR (else /tmp) as
    platform-run-code-<dev>-<ino>.lock, and a kernel still running one after an upgrade holds its
    job's folders there (its job works in or below `root` when it holds root's). Checked with an
    instant's exclusive request in /tmp and our $TMPDIR; CLEAN_ROOT_BUSY while one is held."""
    st = os.stat(root)
    name = f"platform-run-code-{st.st_dev:x}-{st.st_ino:x}.lock"
    for folder in {"/tmp", os.environ.get("TMPDIR") or "/tmp"}:
        try:
            holder = nobody_holds(os.path.join(folder, name))
        except (LockUnavailable, OSError):
            continue  # another user's, or planted: that version could not coordinate either
        if holder is not None:
            raise ConfigError(
                f"{root} is in use by a job or notebook run of an earlier platform_plugin "
                f"(the last to start there: {holder}; e.g. a kernel not restarted since an "
                "upgrade): a cleanup would remove files it is writing. Wait for it to end (or "
                "stop it), then retry", code="CLEAN_ROOT_BUSY")


class CleanupLock:
    """`take()` or raise CLEAN_ROOT_BUSY / CLEAN_LOCK_UNAVAILABLE holding nothing; `share()`
    when the cleanup is done and its full run goes on (the root's lock turned shared without a
    gap, the rest released); `release()`."""

    def __init__(self, root: str | os.PathLike, what: str) -> None:
        self.root = GatedLock(root, what)
        self.above = [RootLock(folder, f"{what} of {root}", "below")
                      for folder in held_folders([root])[1:]]

    @classmethod
    def take(cls, root: str | os.PathLike, what: str = "a cleanup") -> CleanupLock:
        """A lock file that cannot be used refuses (CLEAN_LOCK_UNAVAILABLE): a job could not
        have taken it either, so the cleanup cannot see it. Every lock is taken before any
        check (a job takes its `tree` lock, then checks `below`; a nested cleanup takes
        `below`, then checks `code`): of two starting together, at least one sees the other."""
        lock = cls(root, what)
        try:
            lock.root.acquire(exclusive=True)
            for below in lock.above:
                below.acquire(exclusive=False, required=True)
            # none nested below; then above: no job's tree, no cleanup
            checks = [(RootLock(root, f"{what} of {root}", "below"), True)]
            for below in lock.above:
                checks += [(RootLock(below.root, below.what, "tree"), True),
                           (RootLock(below.root, below.what), False)]
            for check, exclusive in checks:
                check.check_free(exclusive=exclusive, required=True)
            refuse_deleted_holds([(lock.root, True)] + checks)
            refuse_earlier_versions(root)
        except BaseException:
            lock.release()
            raise
        sweep_leftovers()  # (a cleanup's moment: not on a job's start-up path)
        return lock

    def paths(self) -> Iterable[str | None]:
        """The lock files held (protocol.JobHold.take(besides=) skips them)."""
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
