"""A compiled copy of the package for start-up benchmarks.

A pip or wheel install compiles the package's .pyc, and so does an image: start-up is measured
that way. A source tree may or may not hold __pycache__ folders, so the benchmarks never use it
directly: `with compiled_package() as path:` gives a PYTHONPATH entry holding a freshly compiled
`platform_plugin/`, and `env_for(path)` the environment to run it with.
"""
from __future__ import annotations

import compileall
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def compiled_package(source: Path = REPO):
    """`source`: the checkout whose package is copied (another one for an A/B)."""
    root = tempfile.mkdtemp(prefix="bench_pkg_")
    try:
        shutil.copytree(Path(source) / "platform_plugin", Path(root, "platform_plugin"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        compileall.compile_dir(root, quiet=1)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def env_for(path: str, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = path
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the copy's .pyc are the ones compiled above
    return env
