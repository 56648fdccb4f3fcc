"""`--backend auto` without NPUs and a rank table: the program's imports decide (mindspore ->
ms-cluster, torch -> torch, else plain). Loaded only when auto gets this far (backends.choose).
"""
from __future__ import annotations

import importlib.util
import os
import re

# what `auto` looks for in the program's source (compiled by re when `auto` first runs)
_IMPORTS = {
    "ms-cluster": rb"^\s*(?:import|from)\s+mindspore\b",
    "torch": rb"^\s*(?:import|from)\s+torch\b",
}


def program_source(command: list[str]) -> tuple[str, bytes | None]:
    """(what the program is, its source if readable): the script of `python x.py`, the module
    of `python -m pkg.mod`, the code of `python -c ...`, or a `.py` given directly."""
    args = list(command)
    if args and os.path.basename(args[0]).startswith("python"):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
            args = args[2:] if args[0] in ("-W", "-X") else args[1:]  # options with a value
        if len(args) >= 2 and args[0] == "-c":
            return "python -c", args[1].encode()
        if len(args) >= 2 and args[0] == "-m":
            try:
                spec = importlib.util.find_spec(args[1])
            except (ImportError, ValueError):
                spec = None
            origin = spec.origin if spec and spec.origin not in (None, "built-in", "frozen") else None
            return f"module {args[1]}", _read(origin)
    if args and args[0].endswith(".py"):
        return args[0], _read(args[0])
    return (args[0] if args else "?"), None


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 20)
    except OSError:
        return None


def by_imports(command: list[str]) -> tuple[str, str]:
    """(backend name, the reason printed to the user) from what the program imports."""
    what, source = program_source(command)
    for name, pattern in _IMPORTS.items():
        if source is not None and re.search(pattern, source, re.M):
            library = "mindspore" if name == "ms-cluster" else "torch"
            return name, f"{what} imports {library}"
    if source is None:
        return "plain", f"cannot read {what} to see what it imports; only rank variables set"
    return "plain", f"{what} imports neither mindspore nor torch; only rank variables set"
