"""`launch(cmd, **options)`'s keywords -> the validated LaunchOptions record (options.py declares
the options; the CLI parses flags there and never needs this module).
"""
from __future__ import annotations

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.options import FIELDS, LaunchOptions

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict


def _keyword(name: str) -> str:
    """A keyword or one of its aliases -> the field name; unknown -> ConfigError."""
    if name in FIELDS:
        return name
    for f in FIELDS.values():
        if name in f.metadata["aliases"]:
            return f.name
    known = sorted(list(FIELDS) + [a for f in FIELDS.values() for a in f.metadata["aliases"]])
    import difflib  # only for a typo: `launch --help` does not pay for it
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; the options are {', '.join(known)}"
    raise ConfigError([Problem("LAUNCH_UNKNOWN_OPTION", f"launch() has no option {name!r}{hint}",
                               name)])


def from_kwargs(kwargs: Dict[str, Any]) -> LaunchOptions:
    """`launch(cmd, **kwargs)` -> the validated record."""
    values: Dict[str, Any] = {}
    for name, value in kwargs.items():
        key = _keyword(name)
        if key in values:
            raise ConfigError([Problem("LAUNCH_UNKNOWN_OPTION", f"{name!r} repeats the option "
                                       f"{key!r}", name)])
        values[key] = value
    return LaunchOptions(**values)
