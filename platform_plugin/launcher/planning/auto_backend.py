"""`--backend auto` without NPUs and a rank table: the program's imports decide (mindspore ->
ms-cluster, torch -> torch, tensorflow or Ascend's TF Adapter `npu_bridge` -> plain, else plain).
Loaded only when auto gets this far (backends.choose).

A TensorFlow 1.15 rank needs no rendezvous from the launcher: on Ascend the TF Adapter joins the
job through the rank table (NPUs and a table: `choose` picks rank-table before the imports are
read), elsewhere each rank runs on its own with RANK_ID / RANK_SIZE.
"""
from __future__ import annotations

import importlib.util
import os
import re

# what `auto` looks for in the program's source (compiled by re when `auto` first runs):
# (backend, the library named in the reason, its import); the first match wins
_IMPORTS = (
    ("ms-cluster", "mindspore", rb"^\s*(?:import|from)\s+mindspore\b"),
    ("torch", "torch", rb"^\s*(?:import|from)\s+torch\b"),
    ("plain", "tensorflow", rb"^\s*(?:import|from)\s+(?:tensorflow|npu_bridge)\b"),
)


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
    for name, library, pattern in _IMPORTS:
        if source is not None and re.search(pattern, source, re.M):
            if name == "plain":
                return name, (f"{what} imports {library}: only rank variables set (without NPUs "
                              "and a rank table each rank runs on its own)")
            return name, f"{what} imports {library}"
    if source is None:
        return "plain", f"cannot read {what} to see what it imports; only rank variables set"
    return "plain", (f"{what} imports neither mindspore, torch nor tensorflow; only rank "
                     "variables set")
