"""No cleanup of a folder while a job, a notebook run or another cleanup works in it.

A cleanup of CODE/ removes checkpoints, logs and operator caches; a job (`launch()`,
`%dist_run`, `platform-run launch`) or a notebook run (`debug` or `full`) writes exactly those
while it runs. So a real cleanup holds an EXCLUSIVE flock on a lock file named after its root,
and every job and notebook run holds SHARED ones on its working folder and on every folder
above it that a cleanup could be given as its root (`JobHold`): a cleanup refuses
(CLEAN_ROOT_BUSY, exit 2, nothing removed) while any of them runs there, and a job started
while a cleanup runs refuses the same way, before anything is created. Jobs never block each
other (shared with shared). A full run holds its root exclusively while it cleans, then turns
that into a shared hold without letting go (`RootLock.share`), so no other cleanup slips in.

flock is released by the kernel when the holder dies, even by SIGKILL: no stale lock. The file
lives in the temporary folder, never in CODE/ (which the platform snapshots), and is named
after the folder's device and inode (two spellings of one folder, through a symlink or `..`,
are one lock; no hashlib on the launch path). Its last holder removes it.
"""
from __future__ import annotations

import fcntl
import os
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Iterable

from platform_plugin.errors import ConfigError

OPEN_TRIES = 5  # a holder may remove the file between our open and flock: open anew
BUSY_TRIES, BUSY_WAIT_S = 5, 0.01  # a shared request's retries while it is held exclusively


def lock_path(folder: str | os.PathLike) -> str:
    """The lock file of `folder` (which must exist: OSError otherwise)."""
    st = os.stat(folder)
    return os.path.join(os.environ.get("TMPDIR") or "/tmp",
                        f"platform-run-code-{st.st_dev:x}-{st.st_ino:x}.lock")


def write_holder(fd: int, holder: str) -> None:
    """Who took a lock file last, for a refusal's message. Only a name: a full disk (ENOSPC)
    must not fail the job, nor leave the lock held."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
    except OSError:
        pass


class RootLock:
    """`acquire(exclusive=)` or raise CLEAN_ROOT_BUSY; `share()` turns an exclusive lock into
    a shared one (the cleanup is done, the run goes on); `release()`."""

    def __init__(self, root: str | os.PathLike, what: str) -> None:
        self.root, self.what, self.fd = root, what, -1
        try:
            self.path: str | None = lock_path(root)
        except OSError:  # no such folder (any more): nothing there to protect or to clean
            self.path = None

    def acquire(self, *, exclusive: bool) -> RootLock:
        """A shared request that finds the file locked exclusively tries again `BUSY_TRIES`
        times: a job that ends takes the lock exclusively for an instant (`release`: is it the
        last holder?), and jobs must never refuse each other. Nothing stays open on an error."""
        if self.path is None:
            return self
        try:
            self._acquire(self.path, exclusive)
        except BaseException:
            self._close()
            raise
        return self

    def _acquire(self, path: str, exclusive: bool) -> None:
        busy_left, opens = (0 if exclusive else BUSY_TRIES), 0
        while True:
            if self.fd < 0:
                if opens == OPEN_TRIES:
                    return  # the file kept being replaced: do not refuse over it
                opens += 1
                try:  # O_NOFOLLOW: a predictable name in a world-writable folder
                    self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC |
                                      os.O_NOFOLLOW, 0o666)
                except OSError:
                    return  # e.g. another user's lock file: cannot coordinate, do not refuse
            try:
                fcntl.flock(self.fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) |
                            fcntl.LOCK_NB)
            except BlockingIOError:
                if not busy_left:
                    holder = os.pread(self.fd, 512, 0).decode("utf-8", "replace").strip()
                    self.release()
                    raise ConfigError(self._busy(holder, exclusive),
                                      code="CLEAN_ROOT_BUSY") from None
                busy_left -= 1
                time.sleep(BUSY_WAIT_S)
                if not self._still_at(path):  # its last holder removed it: open anew
                    self._close()
                continue
            if self._still_at(path):
                self._write_holder()
                return
            self._close()  # locked a file its last holder had just removed: again

    def _write_holder(self) -> None:
        write_holder(self.fd, f"{self.what} (pid {os.getpid()})")

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = -1

    def _busy(self, holder: str, exclusive: bool) -> str:
        if exclusive:  # every shared holder rewrites the name: the one named may have ended
            last = f" (the last to start there: {holder})" if holder else ""
            return (f"{self.root} is in use by a job, a notebook run or a cleanup{last}: a "
                    "cleanup there would remove files they are writing. Wait for them to end "
                    "(or stop them), then retry")
        return (f"{self.root} is being cleaned by {holder or 'a cleanup'}: it would remove the "
                f"files {self.what} writes there. Retry when the cleanup has ended")

    def _still_at(self, path: str) -> bool:
        try:
            return os.fstat(self.fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            return False

    def share(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_SH)

    def release(self) -> None:
        """The last holder removes the file (no lock file per cleaned folder piles up in the
        temporary folder); a process that opened it meanwhile sees it gone and opens anew."""
        if self.fd < 0:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # alone with it?
            if self.path and self._still_at(self.path):
                os.unlink(self.path)
        except OSError:
            pass  # other holders (shared): the last of them removes it
        finally:
            self._close()


def held_folders(paths: Iterable[str | os.PathLike]) -> list[str]:
    """`paths` and every folder above them that a cleanup accepts as its root: up to, not
    including, the home folder, its parents and `/` (cleanup/root.py refuses those)."""
    home = os.path.realpath(os.path.expanduser("~"))
    folders: list[str] = []
    for path in paths:
        folder = os.path.realpath(path)
        while folder != "/" and folder != home and not home.startswith(folder + "/"):
            if folder in folders:
                break  # the rest above it is listed already
            folders.append(folder)
            folder = os.path.dirname(folder)
    return folders


class JobHold:
    """Shared locks on the folders a job or notebook run works in (`held_folders`), from
    `take()` to `release()`. Raises CLEAN_ROOT_BUSY, holding nothing, while one is cleaned."""

    def __init__(self, locks: list[RootLock]) -> None:
        self.locks = locks

    @classmethod
    def take(cls, paths: Iterable[str | os.PathLike], what: str, *,
             besides: RootLock | None = None) -> JobHold:
        """`besides`: a lock this process holds on one of the folders already (a full run's
        cleanup): that folder is skipped - a second flock of it here would conflict."""
        locks: list[RootLock] = []
        try:
            for folder in held_folders(paths):
                lock = RootLock(folder, what)
                if besides is None or lock.path is None or lock.path != besides.path:
                    locks.append(lock)  # released below if acquire raises
                    lock.acquire(exclusive=False)
        except BaseException:
            cls(locks).release()
            raise
        return cls(locks)

    def release(self) -> None:
        for lock in self.locks:
            lock.release()
        self.locks = []

    def __enter__(self) -> JobHold:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
