"""No cleanup of a folder while a job, a notebook run or another cleanup works in it.

A cleanup of CODE/ removes checkpoints, logs and operator caches, which jobs (`launch()`,
`%dist_run`, `platform-run launch`) and notebook runs write. Three kinds of flock on lock files
named after a folder: `code` - a cleanup holds its root's EXCLUSIVELY, jobs hold SHARED ones on
their working folders and every folder above them a cleanup could clean (`JobHold`); `tree` -
a job claims the tree below its working folders (SHARED; a cleanup below refuses); `below` - a
cleanup holds it SHARED on every folder above its root (a job there refuses;
folder_locks/cleanup.py).
Jobs share, cleanups of folders apart share; a `tree`/`below` check is an instant's exclusive
request (`nobody_holds`). Refusals are CLEAN_ROOT_BUSY (exit 2), before anything is removed or
created. A full run turns its exclusive hold shared without a gap (folder_locks/cleanup.py).

flock dies with its holder, even by SIGKILL. The files live in one private folder per user,
/tmp/platform-run-locks-<uid> (`lock_dir`): not in CODE/ (which the platform snapshots), not in
$TMPDIR (a kernel and a terminal may set it differently). A name is the folder's device and
inode (a symlink, `..` or a bind mount to it: one lock). The
last holder removes the file. A job that cannot take a lock file goes on; a cleanup refuses
(CLEAN_LOCK_UNAVAILABLE): it could not see that job.
"""
from __future__ import annotations

import fcntl
import os
import stat
import time
from typing import Iterable

from platform_plugin.errors import ConfigError

OPEN_TRIES = 5  # a holder may remove the file between our open and flock: open anew
BUSY_TRIES, BUSY_WAIT_S = 5, 0.01  # while held exclusively for an instant (a release, a check)
LOCKS_IN = "/tmp"  # every process of a user on this machine agrees on it, whatever its $TMPDIR
_checked_dir: list[str] = []  # lock_dir() once checked by this process


class LockUnavailable(Exception):
    """The lock file cannot be used (an unwritable or foreign lock folder, a planted file)."""


def lock_dir() -> str:
    """/tmp/platform-run-locks-<uid>, made private (0700) on first use. Raises LockUnavailable
    when it is not a folder of this user (another user made it, or a symlink was planted)."""
    if _checked_dir:
        return _checked_dir[0]
    path = os.path.join(LOCKS_IN, f"platform-run-locks-{os.getuid()}")
    try:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise LockUnavailable(f"{path} is not a folder of this user")
        if st.st_mode & 0o077:  # another user could plant files in it
            os.chmod(path, 0o700)
    except OSError as exc:
        raise LockUnavailable(f"{path}: {exc.strerror or exc}") from None
    _checked_dir.append(path)
    return path


def lock_path(folder: str | os.PathLike, kind: str = "code") -> str:
    """The lock file of `folder` (which must exist: OSError otherwise). LockUnavailable when
    the lock folder cannot be used."""
    st = os.stat(folder)
    return os.path.join(lock_dir(), f"{kind}-{st.st_dev:x}-{st.st_ino:x}.lock")


def write_holder(fd: int, holder: str) -> None:
    """Who took a lock file last, for a refusal's message. Only a name: a full disk (ENOSPC)
    must not fail the job, nor leave the lock held. Written, then cut to its length: ext4
    flushes a file truncated to 0 and then written when it is closed (auto_da_alloc), a disk
    write per lock file on a disk /tmp; this order does not trigger it."""
    data = holder.encode()
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except OSError:
        pass


def read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def open_lock(path: str, create: bool, again: bool = True) -> int:
    """O_NOFOLLOW: no planted symlink; O_NONBLOCK: a planted FIFO never blocks; a file that is
    not a regular file is refused (LockUnavailable). FileNotFoundError when not `create`."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        if not create:
            raise
        if not again:
            raise LockUnavailable(f"{path}: the lock folder keeps disappearing") from None
        _checked_dir.clear()  # the lock folder was removed (a /tmp cleaner): make it anew
        lock_dir()
        return open_lock(path, create, again=False)
    except OSError as exc:
        raise LockUnavailable(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockUnavailable(f"{path} is not a regular file (remove it)")
    return fd


def still_at(fd: int, path: str) -> bool:
    try:
        return os.fstat(fd).st_ino == os.lstat(path).st_ino
    except FileNotFoundError:
        return False


def nobody_holds(path: str, exclusive: bool = True, tries: int = BUSY_TRIES) -> str | None:
    """None when no process holds `path` (`exclusive`; else: holds it exclusively): a request
    for an instant, retried while another check or an ending holder has it for its own
    instant. Else the last holder's name. A file nobody holds is removed, as its last holder
    would have."""
    try:
        fd = open_lock(path, create=False)
    except FileNotFoundError:
        return None
    try:
        for busy_left in range(tries, -1, -1):
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            except BlockingIOError:
                if not busy_left:
                    return read_holder(fd) or "?"
                time.sleep(BUSY_WAIT_S)
                continue
            if exclusive and still_at(fd, path):
                os.unlink(path)
            break
        return None
    finally:
        os.close(fd)


class RootLock:
    """`acquire(exclusive=)` the `kind` lock of a folder or raise CLEAN_ROOT_BUSY; `release()`.
    `problem`: why no lock is held although the folder exists (a shared request
    goes on without; an exclusive one raises CLEAN_LOCK_UNAVAILABLE)."""

    def __init__(self, root: str | os.PathLike, what: str, kind: str = "code") -> None:
        self.root, self.what, self.kind, self.fd = root, what, kind, -1
        self.path: str | None = None
        self.problem: str | None = None
        try:
            self.path = lock_path(root, kind)
        except LockUnavailable as exc:
            self.problem = str(exc)
        except OSError:  # no such folder (any more): nothing there to protect or to clean
            pass

    def acquire(self, *, exclusive: bool, required: bool | None = None) -> RootLock:
        """A request that finds the file locked tries again `BUSY_TRIES` times, 10 ms apart:
        an ending job (`release`: is it the last holder?), a check and a cleanup's sweep hold
        it exclusively for an instant, and jobs must never refuse each other, nor cleanups of
        folders apart (a real holder is still there 50 ms later). Nothing stays open on error.
        `required` (default: `exclusive`, a cleanup): no lock file is CLEAN_LOCK_UNAVAILABLE."""
        if self.path is not None:
            try:
                self._acquire(self.path, exclusive)
            except LockUnavailable as exc:
                self._close()
                self.problem = str(exc)
            except BaseException:
                self._close()
                raise
        if exclusive if required is None else required:
            self._require()
        return self

    def _require(self) -> None:
        if self.problem:
            raise unavailable(self.root, self.problem)

    def _acquire(self, path: str, exclusive: bool) -> None:
        busy_left, opens = BUSY_TRIES, 0
        while True:
            if self.fd < 0:
                if opens == OPEN_TRIES:
                    raise LockUnavailable(f"{path} kept being replaced")
                opens += 1
                self.fd = open_lock(path, create=True)
            try:
                fcntl.flock(self.fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) |
                            fcntl.LOCK_NB)
            except BlockingIOError:
                if not busy_left:
                    holder = read_holder(self.fd)
                    self.release()
                    raise self._busy(holder, exclusive) from None
                busy_left -= 1
                time.sleep(BUSY_WAIT_S)
                if not still_at(self.fd, path):  # its last holder removed it: open anew
                    self._close()
                continue
            if not still_at(self.fd, path):
                self._close()  # locked a file its last holder had just removed: again
                continue
            if exclusive and not self._admitted(path):
                holder = read_holder(self.fd)
                self._close()  # (not release: the lock file is another's)
                raise self._busy(holder, exclusive)
            write_holder(self.fd, f"{self.what} (pid {os.getpid()})")
            return

    def _admitted(self, path: str) -> bool:
        """May an exclusive lock just got be used? (folder_locks/cleanup.GatedLock: not in the
        instant of a full run's hand-over)"""
        return True

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = -1

    def _busy(self, holder: str, exclusive: bool) -> ConfigError:
        """CLEAN_ROOT_BUSY naming `holder`."""
        return busy(self.kind, self.root, self.what, holder, exclusive)

    def check_free(self, *, exclusive: bool = True, required: bool = False) -> None:
        """CLEAN_ROOT_BUSY unless nobody holds this lock now (`exclusive`; else: nobody holds
        it exclusively), see `nobody_holds`. Takes nothing. `required`: as in `acquire`."""
        if self.path is not None:
            try:
                holder = nobody_holds(self.path, exclusive)
            except LockUnavailable as exc:
                self.problem = str(exc)
                holder = None
            if holder is not None:
                raise self._busy("" if holder == "?" else holder, exclusive)
        if required:
            self._require()

    def release(self) -> None:
        """The last holder removes the file (no lock file per cleaned folder piles up in the
        lock folder); a process that opened it meanwhile sees it gone and opens anew."""
        if self.fd < 0:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # alone with it?
            if self.path and still_at(self.fd, self.path):
                os.unlink(self.path)
        except OSError:
            pass  # other holders (shared): the last of them removes it
        finally:
            self._close()


def held_folders(paths: Iterable[str | os.PathLike]) -> list[str]:
    """`paths` and every folder above them that a cleanup accepts as its root: up to, not
    including, the home folder, its parents and `/` (cleanup/root.py refuses those)."""
    return _held([os.path.realpath(p) for p in paths], _home())


def working_folders(paths: Iterable[str | os.PathLike]) -> list[str]:
    """The trees a job claims (`tree` locks): its working folders below the home folder, none
    inside another. A job working in the home folder (or above) claims only its own log and
    cache folders: everything a user has is below it."""
    return _working([os.path.realpath(p) for p in paths], _home())


def _home() -> str:
    return os.path.realpath(os.path.expanduser("~"))


def _held(real_paths: list[str], home: str) -> list[str]:
    folders: list[str] = []
    for folder in real_paths:
        while folder != "/" and folder != home and not home.startswith(folder + "/"):
            if folder in folders:
                break  # the rest above it is listed already
            folders.append(folder)
            folder = os.path.dirname(folder)
    return folders


def _working(real_paths: list[str], home: str) -> list[str]:
    folders = sorted({f for f in real_paths if _held([f], home)})
    return [f for i, f in enumerate(folders)
            if not any(f.startswith(top + "/") for top in folders[:i])]


class JobHold:
    """A job's or notebook run's locks (`code` shared on `held_folders`, `tree` shared on
    `working_folders`, checking that no cleanup works `below` them), from `take()` to
    `release()`. Raises CLEAN_ROOT_BUSY, holding nothing, while one is cleaned."""

    def __init__(self, locks: list[RootLock]) -> None:
        self.locks = locks

    @classmethod
    def take(cls, paths: Iterable[str | os.PathLike], what: str, *,
             besides: Iterable[str | None] = ()) -> JobHold:
        """`besides`: lock files this process holds already (a full run's own cleanup,
        folder_locks/cleanup.py): skipped - a second flock of one here would conflict."""
        held, home = set(besides), _home()
        real = [os.path.realpath(p) for p in paths]  # (a stat per part of each path: once)
        working = _working(real, home)
        hold = cls([])
        try:
            for folder, kind in ([(f, "code") for f in _held(real, home)] +
                                 [(f, "tree") for f in working]):
                lock = RootLock(folder, what, kind)
                if lock.path is None or lock.path not in held:
                    hold.locks.append(lock)  # released below if acquire raises
                    lock.acquire(exclusive=False)
            for folder in working:
                below = RootLock(folder, what, "below")
                if below.path is None or below.path not in held:
                    below.check_free()
        except BaseException:
            hold.release()
            raise
        return hold

    def release(self) -> None:
        for lock in self.locks:
            lock.release()
        self.locks = []

    def __enter__(self) -> JobHold:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


# ------------------------------------------------------------------ the words of a refusal

def busy(kind: str, root: str | os.PathLike, what: str, holder: str,
         exclusive: bool) -> ConfigError:
    """CLEAN_ROOT_BUSY: `what` may not work in `root` while `holder` (the last to write the lock
    file, maybe "") holds its `kind` lock (`exclusive`: we asked for it alone)."""
    last = f" (the last to start there: {holder}{_ended(holder)})" if holder else ""
    if kind == "tree":  # a job works in the folder, our cleanup below it
        text = (f"{what} would remove files in {root}, the working folder of a running job or "
                f"notebook run{last}. Wait for them to end (or stop them), then retry")
    elif kind == "below":  # a cleanup works below the folder, we in all of it
        text = (f"a folder in {root} is being cleaned by {holder or 'a cleanup'}, and {what} "
                "would work there too. Retry when that cleanup has ended")
    elif exclusive:
        text = (f"{root} is in use by a job, a notebook run or a cleanup{last}: a cleanup there "
                "would remove files they are writing. Wait for them to end (or stop them), "
                "then retry")
    else:
        text = (f"{root} is being cleaned by {holder or 'a cleanup'}: it would remove the files "
                f"{what} works on. Retry when the cleanup has ended")
    return ConfigError(text, code="CLEAN_ROOT_BUSY")


def unavailable(root: str | os.PathLike, problem: str) -> ConfigError:
    """CLEAN_LOCK_UNAVAILABLE: a cleanup that cannot take its lock file could not see a job."""
    return ConfigError(f"cannot use the lock of {root}: {problem}. Without it a cleanup could "
                       "remove files a running job writes, so nothing was removed",
                       code="CLEAN_LOCK_UNAVAILABLE")


def _ended(holder: str) -> str:
    """Shared holders rewrite the name, so the one named may have ended while others go on."""
    try:
        os.kill(int(holder.rsplit("(pid ", 1)[1].rstrip(")")), 0)
    except ProcessLookupError:
        return ", which has ended since: another one is still there"
    except (IndexError, ValueError, OSError):
        pass  # no pid in it; alive (EPERM: another user's)
    return ""
