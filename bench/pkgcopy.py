"""Copies of the package for start-up benchmarks: one without any .pyc, one compiled.

Whether an import reads a .pyc or compiles the source decides most of a CLI's start-up. A
source tree may or may not hold __pycache__ folders (PYTHONDONTWRITEBYTECODE=1 is set on this
machine and on the platform's read-only images), so the benchmarks never use it directly:
`with package_copies() as copies:` gives {"no .pyc": dir, ".pyc": dir}, each a PYTHONPATH
entry holding `platform_plugin/`; `env_for(kind, copies)` the environment to run it with
(the stdlib keeps its own .pyc in both: it comes compiled with Python).
"""
from __future__ import annotations

import compileall
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KINDS = ("no .pyc", ".pyc")


@contextlib.contextmanager
def package_copies():
    root = tempfile.mkdtemp(prefix="bench_pkg_")
    try:
        copies = {}
        for kind in KINDS:
            target = Path(root, "pyc" if kind == ".pyc" else "nopyc")
            shutil.copytree(REPO / "platform_plugin", target / "platform_plugin",
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            if kind == ".pyc":
                compileall.compile_dir(str(target), quiet=1)
            copies[kind] = str(target)
        yield copies
    finally:
        shutil.rmtree(root, ignore_errors=True)


def env_for(kind: str, copies: dict, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = copies[kind]
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the no-.pyc copy stays without; the other is compiled
    return env
