"""The rank side of tracking on the path of every rank, also of a rank whose interpreter is not
the launcher's (an image's Python 3.7 under a plugin installed in an environment of its own).

Such a rank cannot import platform_plugin, so the launcher copies the rank side (RANK_SIDE: the
3.7 code of docs/compat.md) into the job's cache and appends that folder to the rank's
PYTHONPATH. What a rank imports from there is exactly this launcher's copy, in a folder only
this user can change (`write_rank_side`). Only when the rank needs it: PYTHONPATH entries come
before site-packages, so a copy put there regardless would shadow an install the rank's
environment has. The rank's interpreter is asked once per attempt, with the rank's own
environment, whether it imports the tracker; a rank on the launcher's own interpreter is never
asked (it imports what the launcher imports).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Callable

from platform_plugin.errors import ConfigError
from platform_plugin.launcher.planning.plan import LaunchPlan, RankSpec
from platform_plugin.util.folders import own_folder
from platform_plugin.util.regular_file import Refused

# The modules a rank imports, relative to the package folder: they are Python 3.7 code
# (tests/compat/test_py37.py compiles them with a 3.7 interpreter); every module of
# tracking/integrations/ is added to these.
RANK_SIDE = ("__init__.py", "errors.py", "variables.py", "util/__init__.py", "util/numbers.py",
             "tracking/__init__.py", "tracking/shared/__init__.py", "tracking/shared/sink_choice.py",
             "tracking/rank/__init__.py", "tracking/rank/identity.py", "tracking/rank/job_id.py",
             "tracking/rank/spool.py", "tracking/rank/tracker.py",
             "checkpoint/__init__.py", "checkpoint/manifest.py", "checkpoint/saving.py",
             "checkpoint/mindspore.py", "checkpoint/torch.py",
             "util/__init__.py", "util/regular_file.py")
INTEGRATIONS = "tracking/integrations"
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = "rank-side"  # in the job's cache folder; holds platform_plugin/
PYTHON_NAME = re.compile(r"python[0-9.]*m?")  # python, python3, python3.7, python3.7m
# What the probe imports: the tracker, as a rank's get_tracker() does (the stdlib only)
PROBE = "import sys; sys.path[0] = sys.argv[1]; import platform_plugin.tracking.rank.tracker"
PATH_FLAGS = {"-E", "-I", "-s", "-S"}  # interpreter flags that change what a rank can import
PROBE_TIMEOUT_S = 60  # an interpreter on a slow shared disk, on a loaded machine


def rank_side_files() -> list[str]:
    """RANK_SIDE and the framework integrations, relative to the package folder."""
    integrations = sorted(f"{INTEGRATIONS}/{name}" for name in
                          os.listdir(os.path.join(PACKAGE_DIR, INTEGRATIONS)) if name.endswith(".py"))
    return list(RANK_SIDE) + integrations


def with_rank_side(plan: LaunchPlan,
                   note: Callable[[str], None] | None = None) -> LaunchPlan:
    """The plan, its ranks given the copy of the rank side when their interpreter is another
    one than the launcher's and cannot import the tracker (`note(text)` says so); else the
    plan itself."""
    workers = plan.workers
    if not workers:
        return plan
    first = workers[0]
    python = foreign_python(first)
    if python is None or importable(python, first):
        return plan
    folder = write_rank_side(os.path.join(plan.cache_dir, FOLDER))
    if note is not None:
        note(f"{python} cannot import platform_plugin: its ranks import the rank side of "
             f"tracking from {folder} (appended to their PYTHONPATH)")
    ranks = tuple(dataclasses.replace(r, env={**r.env, "PYTHONPATH": os.pathsep.join(
        p for p in (r.env.get("PYTHONPATH"), folder) if p)}) if r.argv[:1] == first.argv[:1]
        else r for r in plan.ranks)
    return dataclasses.replace(plan, ranks=ranks)


def foreign_python(rank: RankSpec) -> str | None:
    """The rank's Python interpreter when it is not the launcher's, else None (also when the
    rank's program is no Python interpreter: a shell script, msrun)."""
    program = rank.argv[0]
    if not PYTHON_NAME.fullmatch(os.path.basename(program)):
        return None
    path = (os.path.join(rank.cwd, program) if os.sep in program
            else shutil.which(program, path=rank.env.get("PATH")))
    if path is None or os.path.abspath(path) == os.path.abspath(sys.executable):
        return None
    return path


def importable(python: str, rank: RankSpec) -> bool:
    """Whether `python` imports the tracker in the rank's environment, folder and flags. An
    interpreter that does not start or answer counts as able: the rank then fails, or not, as
    it would without the launcher, and says why in its log."""
    argv = [python, *interpreter_flags(rank.argv), "-c", PROBE, first_path(rank.argv, rank.cwd)]
    try:
        done = subprocess.run(argv, env=rank.env, cwd=rank.cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return True
    return done.returncode == 0


def interpreter_flags(argv: tuple[str, ...]) -> list[str]:
    flags = []
    for arg in argv[1:]:
        if not arg.startswith("-") or arg in ("-c", "-m"):
            break
        flags += [arg] if arg in PATH_FLAGS else []
    return flags


def first_path(argv: tuple[str, ...], cwd: str) -> str:
    """sys.path[0] of the rank: its script's folder, or its working folder for -m and -c."""
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-W", "-X"):  # flags with a value
            next(args, None)
        elif not arg.startswith("-"):
            return os.path.dirname(os.path.join(cwd, arg))
        elif arg in ("-c", "-m"):
            break
    return cwd


def write_rank_side(folder: str) -> str:
    """Copy the rank side into `folder`/platform_plugin; returns `folder`.

    The copy is imported by every rank, so nothing in `folder` is trusted: its parent (the
    job's cache folder) must be this user's own (util/folders.own_folder: made 0700, or a
    folder of this user's with group and world write taken off, never a link), the copy is
    made in a fresh folder of its own (0700, nothing else in it) and then takes `folder`'s
    name, whatever was there before (a planted sitecustomize.py, a stale .pyc, a link out of
    the cache) set aside and removed. The .pyc files a rank then writes are in its own copy."""
    parent = os.path.dirname(os.path.abspath(folder))
    try:
        own_folder(parent)
    except Refused as exc:
        raise ConfigError(f"the rank side of tracking is not copied into {folder}: {exc}; nothing "
                          "in a folder another user can change is imported by a rank. Remove it, "
                          "or give another --cache-dir", code="LAUNCH_RANK_SIDE_NOT_OWN") from None
    fresh = ""
    try:
        fresh = tempfile.mkdtemp(prefix=f".{FOLDER}-", dir=parent)
        for relative in rank_side_files():
            target = os.path.join(fresh, "platform_plugin", relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(PACKAGE_DIR, relative), target)
        _take_name(fresh, folder)
    except OSError as exc:
        if fresh:
            shutil.rmtree(fresh, ignore_errors=True)  # half a copy is never left behind
        raise ConfigError(f"cannot copy the rank side of tracking into {folder} for ranks whose "
                          f"interpreter cannot import platform_plugin: {exc.strerror or exc}; "
                          "free space there or give another --cache-dir",
                          code="LAUNCH_RANK_SIDE") from None
    return folder


def _take_name(fresh: str, folder: str) -> None:
    """Rename `fresh` to `folder`; what had that name (a folder, a file, a link: never followed)
    is moved into a new folder of ours first and removed with it (what cannot be removed - a
    planted folder of another user - stays there, out of every rank's path)."""
    if os.path.lexists(folder):
        old = tempfile.mkdtemp(prefix=f".{FOLDER}-old-", dir=os.path.dirname(fresh))
        os.rename(folder, os.path.join(old, FOLDER))
        shutil.rmtree(old, ignore_errors=True)
    os.rename(fresh, folder)
