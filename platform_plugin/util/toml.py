"""TOML reading on every supported Python: the stdlib's `tomllib` (3.11+), else `tomli`
(the same parser, published for 3.7+ and declared as a dependency for Python < 3.11).

    from platform_plugin.util.toml import loads, tomllib   # loads(...), tomllib.TOMLDecodeError
"""
from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by `make test-compat` on Python 3.9
    import tomli as tomllib

__all__ = ["loads", "tomllib"]


class NestedTooDeep(tomllib.TOMLDecodeError):
    """Nesting deeper than Python's recursion: a TOMLDecodeError like any other invalid TOML."""

    def __init__(self) -> None:  # (TOMLDecodeError's own arguments differ between versions)
        ValueError.__init__(self, "arrays nested deeper than Python parses")


def loads(text: str) -> dict:
    """`tomllib.loads`. It parses `x = [[[...` recursively: 200,000 levels (well under any of
    our files' size bounds) were a RecursionError; they raise NestedTooDeep instead."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise NestedTooDeep() from None
