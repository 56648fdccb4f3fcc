"""One cleanup of a CODE/ folder at a time, and none while a full run works in it.

A full run cleans CODE/ and then runs its notebook there; a second full run (or `platform-run
clean`) started meanwhile would remove the first one's checkpoints, logs and operator caches
while it writes them. So a real cleanup holds an EXCLUSIVE flock on a lock file named after
the folder, and a full run keeps a SHARED one until its notebook ends: a cleanup refuses
(CLEAN_ROOT_BUSY, exit 2, nothing removed) while any full run works there; full runs with
--no-cleanup may share the folder. flock is released by the kernel when the holder dies, even
by SIGKILL: no stale lock. The file lives in the temporary folder, never in CODE/ (which the
platform snapshots).
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from platform_plugin.errors import ConfigError


def lock_path(root: Path) -> str:
    import hashlib  # only a real cleanup pays for it (not a dry run, not --help)

    digest = hashlib.sha1(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"platform-run-code-{digest}.lock")


class RootLock:
    """`acquire(exclusive=)` or raise CLEAN_ROOT_BUSY; `share()` turns an exclusive lock into
    a shared one (the cleanup is done, the run goes on); `release()`."""

    def __init__(self, root: Path, what: str) -> None:
        self.root, self.what, self.fd = root, what, -1
        self.path = lock_path(root)

    def acquire(self, *, exclusive: bool) -> "RootLock":
        path = self.path
        for _ in range(5):  # a holder may remove the file between our open and our flock
            try:
                self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError:
                return self  # e.g. another user's lock file: cannot coordinate, do not refuse
            try:
                fcntl.flock(self.fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) |
                            fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(self.fd, 512, 0).decode("utf-8", "replace").strip()
                self.release()
                raise ConfigError(f"{self.root} is in use by {holder or 'another run'}: a "
                                  "cleanup there would remove files it is writing. Wait for it "
                                  "to end (or stop it), then retry", code="CLEAN_ROOT_BUSY"
                                  ) from None
            if self._still_at(path):
                os.ftruncate(self.fd, 0)
                os.pwrite(self.fd, f"{self.what} (pid {os.getpid()})".encode(), 0)
                return self
            os.close(self.fd)  # locked a file its last holder had just removed: again
            self.fd = -1
        return self

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
            if self._still_at(self.path):
                os.unlink(self.path)
        except OSError:
            pass  # other holders (shared): the last of them removes it
        finally:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = -1
