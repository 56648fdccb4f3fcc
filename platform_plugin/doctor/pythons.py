"""The doctor's `Python` rows: which route a notebook on this image takes.

The plugin runs on Python 3.9+. An image whose kernel or `python` is older (the Ascend
TensorFlow 1.15 and MindSpore 1.x images: 3.7) runs the plugin from an environment of its own
and only the ranks on the image's Python: the launcher gives them the rank side of tracking,
which is 3.7 code (docs/compat.md). Rows: (status, check, detail, fix).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

PLUGIN_FLOOR = (3, 9)
RANK_FLOOR = (3, 7)
VERSION = "import sys; print('%d.%d.%d' % sys.version_info[:3])"


def python_rows(environ: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """One WARN row per interpreter too old for the plugin (with the route to take), else one
    OK row naming every interpreter found."""
    found = interpreters(environ)
    here = "%d.%d.%d" % sys.version_info[:3]
    old = [(what, path, version) for what, path, version in found
           if version is not None and version_tuple(version) < PLUGIN_FLOOR]
    if not old:
        seen = "; ".join(f"{what} {version or '(no answer)'}" for what, _, version in found)
        return [("OK", "Python", f"this environment {here} ({sys.executable})"
                 + (f"; {seen}" if seen else "") + ": the plugin runs in the kernel "
                 "(%load_ext platform_plugin, %dist_run)", "")]
    return [old_python_row(what, path, version) for what, path, version in old]


def old_python_row(what: str, path: str, version: str) -> tuple[str, str, str, str]:
    run = os.path.join(os.path.dirname(sys.executable), "platform-run")
    kernel = what.split(" ", 1)[1] if what.startswith("kernel ") else "KERNEL"
    if version_tuple(version) < RANK_FLOOR:
        return ("WARN", "Python", f"{what} is Python {version} ({path}): its ranks cannot import "
                "the rank side of tracking (Python 3.7+), their records are not tracked",
                "run the ranks on a Python 3.7+ of the image")
    return ("WARN", "Python", f"{what} is Python {version} ({path}): the plugin needs 3.9+, so it "
            f"runs from its own environment ({sys.prefix}) and the ranks on {version}, which get "
            "the rank side of tracking from the launcher",
            f"in the notebook: `!{run} launch --nproc N -- {{sys.executable}} train.py` (not "
            f"%dist_run); from a terminal: `{run} debug|full NOTEBOOK -k {kernel}`")


def interpreters(environ: dict[str, str]) -> list[tuple[str, str, str | None]]:
    """(what, path, version) of `python` on PATH and of each Python kernel Jupyter knows."""
    candidates = []
    python = shutil.which("python", path=environ.get("PATH")) or shutil.which(
        "python3", path=environ.get("PATH"))
    if python:
        candidates.append(("`python` on PATH", python))
    candidates += kernel_pythons()
    return [(what, path, version_of(path)) for what, path in candidates]


def kernel_pythons() -> list[tuple[str, str]]:
    try:
        from jupyter_client.kernelspec import KernelSpecManager  # jupyter: only for this row
        specs = KernelSpecManager().get_all_specs()
    except Exception:  # noqa: BLE001 - no Jupyter here, or a broken kernel folder
        return []
    found = []
    for name, spec in sorted(specs.items()):
        argv = spec.get("spec", {}).get("argv") or []
        if spec.get("spec", {}).get("language", "").lower() != "python" or not argv:
            continue
        path = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
        if path:
            found.append((f"kernel {name}", path))
    return found


def version_of(python: str) -> str | None:
    try:
        done = subprocess.run([python, "-c", VERSION], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2])
