"""Can a folder hold what we are about to write? Asked before anything is created. Is a folder
we write code into our own?"""
from __future__ import annotations

import os
import stat

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.regular_file import LinkRefused, Refused

_OWN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def own_folder(path: str) -> None:
    """Make `path` a folder only this user can change, before anything is copied into it or
    imported from it: created with mode 0700 when missing (its parents as usual); when it
    exists, it must be a folder, not a link, owned by this user, and group and world write
    are taken off it (a umask of 002 made it so; once off, no one else adds an entry). Raises
    util/regular_file.Refused with the reason, or another OSError."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    try:  # the descriptor, not the name: what is checked is what is changed
        fd = os.open(path, _OWN_FLAGS)
    except OSError as exc:
        if os.path.islink(path):
            raise LinkRefused(f"{path} is a link, not a folder of this user's") from None
        raise Refused(f"{path} is not a folder ({exc.strerror})") from None
    try:
        found = os.fstat(fd)
        if found.st_uid != os.geteuid():
            raise Refused(f"{path} belongs to another user (uid {found.st_uid}), not to this one")
        if found.st_mode & 0o022:
            os.fchmod(fd, stat.S_IMODE(found.st_mode) & ~0o022)
    finally:
        os.close(fd)


def check_own_folder(folder: str, what: str, code: str, flag: str, *, link_allowed: bool) -> None:
    """An existing `folder` the launcher writes into and reads back (a job folder, a checkpoint
    folder) must be this user's: one another user owns (planted in a shared log folder, or
    under a job id someone can guess) could be filled with what the job then trusts - a
    checkpoint it resumes from, a spool it ships. `link_allowed`: a folder the user names may be
    a link (to a bigger disk; its target is checked), one the launcher names is refused as a
    link. A missing folder passes (the launcher makes it). Raises ConfigError `code`."""
    try:
        found = os.stat(folder) if link_allowed else os.lstat(folder)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError([Problem(code, f"the {what} folder {folder} cannot be checked: "
                                   f"{exc.strerror or exc}", flag)]) from None
    if stat.S_ISLNK(found.st_mode):
        why = "is a link (planted there?), not a folder of this user's"
    elif not stat.S_ISDIR(found.st_mode):
        return  # a file: check_writable_folder's `_NOT_DIR` says so
    elif found.st_uid != os.geteuid() and found.st_uid != _new_entries_owner(os.path.dirname(os.path.abspath(folder))):
        why = f"belongs to another user (uid {found.st_uid}), not to this one (uid {os.geteuid()})"
    else:
        return
    raise ConfigError([Problem(code, f"the {what} folder {folder} {why}: the job would write "
                               "into it and trust what it finds there. Remove it, or give "
                               "another folder", flag)])


def _new_entries_owner(folder: str) -> int | None:
    """The owner an entry this process makes in `folder` gets (None: none could be made). Not
    always this user: root's files on a network mount exported with root_squash belong to
    `nobody`, and a folder such a launcher made there is its own. Asked only when an owner
    differs (a probe folder made and removed)."""
    path = os.path.join(folder, f".platform-probe-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.mkdir(path, 0o700)
    except OSError:
        return None
    try:
        return os.lstat(path).st_uid
    except OSError:
        return None
    finally:
        try:
            os.rmdir(path)
        except OSError:
            pass


def check_writable_folder(folder: str, what: str, code: str, flag: str) -> None:
    """`folder` is, or can be made, a writable directory: every existing part of the path is a
    directory and the deepest existing one takes new entries (a read-only mount does not, for
    root neither: access(2) reports EROFS). Raises ConfigError `<code>_NOT_DIR` / `_READONLY`."""
    probe = os.path.abspath(folder)
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise ConfigError([Problem(f"{code}_NOT_DIR", f"the {what} folder {folder} cannot be "
                                   f"created: {probe} is a file. Give another folder.", flag)])
    reason = "" if os.access(probe, os.W_OK | os.X_OK) else "read-only for this user or on a " \
        "read-only file system"
    if not reason and not _surely_writable(probe):
        reason = _probe_entry(probe)
    if reason:
        raise ConfigError([Problem(f"{code}_READONLY", f"the {what} folder {folder} is not "
                                   f"writable ({probe}: {reason}). Give a writable folder.",
                                   flag)])


def _surely_writable(folder: str) -> bool:
    """access(2) said yes, and the file system is a real one with room: mounted read-write,
    with blocks (/proc, /sys and the like have none: access(2) says yes to root there) and
    free blocks and inodes. Otherwise only making an entry tells (`_probe_entry`). The probe is
    skipped when this holds: on a busy disk a mkdir + rmdir before every job is a wait."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return False
    return (not fs.f_flag & os.ST_RDONLY and fs.f_blocks > 0 and fs.f_bavail > 0
            and fs.f_favail > 0)


def _probe_entry(folder: str) -> str:
    """Make and remove a uniquely named folder in `folder`: "" when that worked, else why not.
    (As tempfile.mkdtemp, without importing tempfile and random before every job.)"""
    for _ in range(3):
        path = os.path.join(folder, f".platform-probe-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        except OSError as exc:
            return f"cannot create entries there: {exc.strerror}"
        try:
            os.rmdir(path)
        except OSError:
            pass  # made it, so the folder takes entries
        return ""
    return ""  # three names taken: entries exist there, so it takes them


def check_cwd(code: str) -> None:
    """Every command resolves paths against the current folder: one deleted under the shell or
    the notebook is a refusal with `code`, not a FileNotFoundError traceback from the first
    os.getcwd() (a folder moved away still answers it: only a deleted one is refused)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise ConfigError("the current folder no longer exists (it was deleted while this shell "
                          "or kernel was in it): change to an existing folder "
                          "(`cd`, or `%cd` in a notebook) and retry", code=code) from None
