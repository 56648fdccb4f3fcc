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
            reason = _LOOP if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        else:
            return result
    raise ConfigError([Problem(code, f"the {what} {os.fspath(path)!r} cannot be used: {reason}. "
                               "Give the real path.", flag)])


_LOOP = "it is a symbolic link that leads back to itself (a loop)"


PATH_MAX = 4096  # Linux: bytes of a path a system call takes, its terminating NUL included
NAME_MAX = 255  # bytes of one name in it
MAX_LEVELS = 256  # os.makedirs recurses once per missing level: 1,000 levels were a RecursionError


def path_problem(text: str) -> str | None:
    """What makes `text` no path a folder or file can be made at (empty, a NUL byte, longer than
    the system takes, a name over 255 bytes, deeper than MAX_LEVELS) or one this package will not
    make (a control character: a newline or an escape in a path garbles the lines and the
    terminal that show it), or None: checked on the text alone, before anything is created. `~`
    is expanded first, as the callers do."""
    if not isinstance(text, str) or not text.strip():
        return "is empty: give a path"
    if "\0" in text:
        return "holds a NUL byte"
    control = next((c for c in text if c < " " or c == "\x7f"), None)
    if control is not None:  # a folder can have one, but every line naming it breaks or recolours
        return f"holds a control character (U+{ord(control):04X}): give a path without one"
    path = os.path.expanduser(text)
    size = len(path.encode("utf-8", "surrogateescape"))
    if size >= PATH_MAX:
        return f"is {size} bytes long: a path holds at most {PATH_MAX - 1}"
    names = [name for name in path.split(os.sep) if name]
    longest = max((len(name.encode("utf-8", "surrogateescape")) for name in names), default=0)
    if longest > NAME_MAX:
        return f"holds a name of {longest} bytes: a file or folder name holds at most {NAME_MAX}"
    if len(names) > MAX_LEVELS:
        return f"is {len(names)} folders deep: at most {MAX_LEVELS}"
    return None


class PathArgument:
    """An argparse `type=` for a path flag or argument: the text as given, or ConfigError `code`
    naming `flag` when `path_problem` refuses it (argparse lets a ConfigError through)."""

    __name__ = "path"

    def __init__(self, code: str, flag: str) -> None:
        self.code, self.flag = code, flag

    def __call__(self, text: str) -> str:
        why = path_problem(text)
        if why:
            shown = text if len(text) <= 60 else text[:60] + "..."
            raise ConfigError([Problem(self.code, f"{self.flag} {shown!r} {why}", self.flag)])
        return text


checked_path = PathArgument  # type=checked_path(CODE, "--flag")
