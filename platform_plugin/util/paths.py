"""A path the user typed, made absolute with its links resolved, or a refusal with a code.

`Path.resolve()` raises RuntimeError("Symlink loop ...") on a link that points back at itself
(Python 3.9-3.12; 3.13 returns the path as it is and the first open fails with ELOOP): a
notebook, `--cwd`, `--output`, `--data-dir` or `--log-dir` that loops would be a traceback. Both
ways end here as the caller's code, naming the path.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from platform_plugin.errors import ConfigError, Problem


def resolved(path: str | os.PathLike, what: str, code: str, flag: str = "") -> Path:
    """`path` absolute, links resolved; it need not exist (the caller says what a missing one
    means). Raises ConfigError `code` for a symlink loop or a path no system call takes (a NUL
    byte, a name too long)."""
    try:
        result = Path(path).resolve()
    except RuntimeError:  # Python <= 3.12: "Symlink loop from ..."
        reason = _LOOP
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long
        reason = str(exc)
    else:
        try:
            os.stat(result)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENAMETOOLONG):
                return result  # missing, a file on the way, a closed folder: the caller's checks
            reason = _LOOP if exc.errno == errno.ELOOP else exc.strerror
        else:
            return result
    raise ConfigError([Problem(code, f"the {what} {os.fspath(path)!r} cannot be used: {reason}. "
                               "Give the real path.", flag)])


_LOOP = "it is a symbolic link that leads back to itself (a loop)"
