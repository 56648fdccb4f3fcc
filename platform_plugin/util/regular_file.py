"""Read a small input file that must be a regular file, with a bound, never blocking.

A FIFO blocks open() until a writer comes (hence O_NONBLOCK, and a FIFO is refused), a device
such as /dev/zero never ends, and a file given by mistake (a log, a dataset) would be read
whole: the callers turn these exceptions into their own refusals with a code.
"""
from __future__ import annotations

import os
import stat


class NotRegularFile(OSError):
    """A folder, FIFO, socket or device (or a link to one)."""


class FileTooLarge(OSError):
    """More bytes than the caller's bound."""


def read_regular_file(path: str, max_bytes: int) -> bytes:
    """The file's bytes. Raises FileNotFoundError, NotRegularFile, FileTooLarge, other OSError,
    ValueError (a NUL in the path)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"{path} is not a regular file")
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
        raise FileTooLarge(f"{path} is larger than {max_bytes} bytes")
    return b"".join(chunks)
