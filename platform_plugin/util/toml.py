"""TOML reading on every supported Python: the stdlib's `tomllib` (3.11+), else `tomli`
(the same parser, published for 3.7+ and declared as a dependency for Python < 3.11).

    from platform_plugin.util.toml import tomllib   # tomllib.loads(...), tomllib.TOMLDecodeError
"""
from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by `make test-compat` on Python 3.9
    import tomli as tomllib

__all__ = ["tomllib"]
