"""One way to read a file that others can write: a job's, a cache's or a checkpoint's.

A job folder, a spool, a checkpoint folder or a cache is written by ranks, by other launchers,
by a user's script - by anyone who can write there. Every reader of such a file goes through
this module, which refuses, with a one-line reason (`Refused`, an OSError):
  - what is not a regular file: a FIFO blocks open() until a writer comes (hence O_NONBLOCK), a
    device such as /dev/zero never ends, a socket or a folder is no file;
  - a link beneath the folder the caller names (`within`): every component under it is opened
    with O_NOFOLLOW, so a link planted there (to /etc/passwd, to a folder outside) is never
    followed; the folder itself may be a link (a log folder on a bigger disk);
  - more bytes than the caller's bound (a log or a dataset given by mistake is never read whole);
and, for JSON (`loads_json`, `read_json`), nesting deeper than MAX_JSON_DEPTH (`TooDeep`, a
ValueError), found before the parser sees it: 200,000 `[` would exhaust its recursion.

A file a user names on the command line (a rank table, an env file) is read with `within`
None: links followed, the other checks kept.

Rank side too (checkpoint/manifest.py, tracking/rank/spool.py): the stdlib only, Python 3.7 code.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
from itertools import accumulate
from typing import Optional, Union

# No file the package writes nests deeper than 4 (a job.json); a caller may allow more
MAX_JSON_DEPTH = 64
_OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# a JSON string, escapes included: its brackets are no nesting
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = bytes(range(256)).translate(None, b"[]{}")  # every byte but brackets: deleted
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class Refused(OSError):
    """A file this module will not read; str() is the one-line reason."""


class NotRegularFile(Refused):
    """A folder, FIFO, socket or device (or a link to one)."""


class FileTooLarge(Refused):
    """More bytes than the caller's bound."""


class LinkRefused(Refused):
    """A link beneath the folder the file must be in, or a path outside it."""


class TooDeep(ValueError):
    """JSON nested deeper than the caller's bound (refused before it is parsed)."""


def open_regular(path: str, within: Optional[str] = None) -> int:
    """A read-only, non-blocking descriptor of the regular file `path` (the caller closes it).
    `within`: a folder `path` must be in, no link followed beneath it. Raises Refused (its
    subclasses), FileNotFoundError, other OSError, ValueError (a NUL in the path)."""
    fd = _open_beneath(path, within) if within is not None else os.open(path, _OPEN_FILE)
    return _regular(fd, path)


def open_regular_for_writing(path: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor to write the regular file `path` (`flags`: os.O_WRONLY or os.O_RDWR with
    O_CREAT, O_APPEND, O_TRUNC as wanted; the caller closes it) in a folder others can write
    too: a link planted at `path` is not written through (it would append to, or truncate, the
    file it names), a FIFO does not block the open. Raises LinkRefused, NotRegularFile, OSError."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefused("%s is a link: it is not written through" % path) from None
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise NotRegularFile("%s is not a regular file (a FIFO)" % path) from None
        raise
    return _regular(fd, path)


def open_regular_file(path: str, within: Optional[str] = None):
    """`open_regular` as a binary file object (seek, read)."""
    return os.fdopen(open_regular(path, within), "rb")


def read_regular_file(path: str, max_bytes: int, within: Optional[str] = None) -> bytes:
    """The file's bytes, at most `max_bytes` (else FileTooLarge). Raises as `open_regular`."""
    fd = open_regular(path, within)
    try:
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise FileTooLarge("%s is larger than %d bytes" % (path, max_bytes))
    return b"".join(chunks)


def json_depth(data: Union[bytes, str]) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings aside).
    Cheap when the text has few brackets; linear otherwise, never recursive."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    brackets = raw.count(b"[") + raw.count(b"{")
    if brackets <= 1:
        return brackets
    only = _JSON_STRING.sub(b"", raw).translate(None, _BRACKETS)
    return max(accumulate(_DEPTH_STEP[b] for b in only), default=0)


def loads_json(data: Union[bytes, str], max_depth: int = MAX_JSON_DEPTH):
    """json.loads, once the nesting is known to be within `max_depth` (else TooDeep). Raises
    ValueError for anything that is not JSON (not UTF-8 included)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        depth = json_depth(raw)
        if depth > max_depth:
            raise TooDeep("JSON nested %d deep (at most %d taken)" % (depth, max_depth))
    try:
        return json.loads(raw.decode("utf-8") if isinstance(data, bytes) else data)
    except RecursionError:  # a recursion limit set lower than max_depth: still refused, not raised
        raise TooDeep("JSON nested deeper than this interpreter parses") from None


def read_json(path: str, max_bytes: int, within: Optional[str] = None,
              max_depth: int = MAX_JSON_DEPTH):
    """The JSON value of a file read as `read_regular_file` reads it. Raises Refused, OSError,
    ValueError (not UTF-8, not JSON, TooDeep)."""
    return loads_json(read_regular_file(path, max_bytes, within), max_depth)


def reason(exc: BaseException) -> str:
    """A one-line reason for a refusal or failure of this module (no traceback, no repr)."""
    if isinstance(exc, (Refused, TooDeep)):
        return str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text (byte %d)" % exc.start
    if isinstance(exc, json.JSONDecodeError):
        return "not JSON: %s (line %d, column %d)" % (exc.msg, exc.lineno, exc.colno)
    if isinstance(exc, OSError):
        return "%s%s" % (exc.strerror or type(exc).__name__, ": %s" % exc.filename if exc.filename else "")
    return ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0][:300]


def _regular(fd: int, path: str) -> int:
    """`fd` if it is a regular file's, else closed and NotRegularFile."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile("%s is not a regular file (a folder, FIFO, socket or device)" % path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_beneath(path: str, within: str) -> int:
    """Open `path`, which must be in `within`, one component at a time with O_NOFOLLOW."""
    root, target = os.path.abspath(within), os.path.abspath(path)
    relative = os.path.relpath(target, root)
    parts = relative.split(os.sep)
    if relative == os.curdir or parts[0] == os.pardir:
        raise LinkRefused("%s is not inside %s" % (path, within))
    folder = os.open(root, _OPEN_FOLDER)
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            flags = (_OPEN_FILE if last else _OPEN_FOLDER) | os.O_NOFOLLOW
            try:
                fd = os.open(part, flags, dir_fd=folder)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, folder):
                    raise LinkRefused("%s is a link (%s), not followed: only a regular file inside "
                                      "%s is read" % (path, os.path.join(*parts[:depth + 1]),
                                                      within)) from None
                raise OSError(exc.errno, exc.strerror, path) from None  # the whole path named
            if last:
                return fd
            os.close(folder)
            folder = fd
    finally:
        os.close(folder)
    raise AssertionError("unreachable")  # parts is never empty


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False
