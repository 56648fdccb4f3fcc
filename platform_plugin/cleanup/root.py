"""Which folder a cleanup works in (ROOT), and the folders it refuses.

    --root > $PLATFORM_CODE_DIR > the nearest ancestor named CODE > the cwd if it is a project

Refused (exit 2, nothing deleted): `/`, the home folder and any folder above it, a folder
that does not look like a project, and a ROOT that is itself a symlink — the walk never
follows links, so a linked ROOT is named with its target and the user passes the target.
Symlinks higher up the path are resolved; the report names the real folder it cleaned.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from platform_plugin.cleanup.rules import NEVER_ENTER
from platform_plugin.errors import ConfigError
from platform_plugin.variables import PLATFORM_CODE_DIR

ROOT_ENV = PLATFORM_CODE_DIR.name
PROJECT_MARKERS = (".ipynb", ".py")  # what makes a folder "look like a project"


def find_root(explicit: str | os.PathLike | None = None, *, cwd: str | os.PathLike | None = None,
              environ: Mapping[str, str] | None = None) -> Path:
    """ROOT = --root, else $PLATFORM_CODE_DIR, else the nearest ancestor named CODE, else
    the cwd when it looks like a project. Refuses /, the home folder (and above), a symlink,
    and non-projects."""
    environ = os.environ if environ is None else environ
    start = Path(os.path.abspath(cwd or os.getcwd()))
    if explicit:
        named, how = Path(explicit), "--root"
    elif PLATFORM_CODE_DIR.is_set(environ):
        named, how = Path(PLATFORM_CODE_DIR.get(environ)), ROOT_ENV
    else:
        code = next((d for d in (start, *start.parents) if d.name == "CODE"), None)
        named, how = (code, "the nearest folder named CODE") if code else (start, "the cwd")
    named = named if named.is_absolute() else start / named
    if named.is_symlink():
        raise ConfigError(
            f"refusing to clean {named} (from {how}): it is a symlink to "
            f"{os.path.realpath(named)}, and cleanup never follows symlinks; pass that folder "
            f"itself with --root if it is the one to clean", code="CLEAN_ROOT_SYMLINK")
    root = named.resolve()
    if not root.is_dir():
        raise ConfigError(f"cleanup root {root} (from {how}) is not a folder", code="CLEAN_ROOT")
    refused = _refused_as(root)
    if refused:
        raise ConfigError(f"refusing to clean {root} (from {how}): it is {refused}; pass --root "
                          f"CODE_DIR or set {ROOT_ENV}", code="CLEAN_ROOT_REFUSED")
    # A folder that was named (CODE, --root, the env) may keep its projects one level down
    # (CODE/exp1/train.py); a bare cwd must be the project itself, so the parent of projects
    # (a home folder, a shared mount) never passes for one.
    if not looks_like_project(root, depth=0 if how == "the cwd" else 1):
        raise ConfigError(f"refusing to clean {root} (from {how}): it holds no notebook or "
                          f"Python source, so it does not look like a CODE/ folder; pass --root "
                          f"CODE_DIR or set {ROOT_ENV}", code="CLEAN_ROOT_REFUSED")
    return root


def _refused_as(root: Path) -> str | None:
    if root == Path(root.anchor):
        return "the filesystem root"
    home = Path(os.path.expanduser("~")).resolve()
    if root == home:
        return "the home folder"
    if root in home.parents:
        return f"a parent of the home folder {home}"
    return None


def looks_like_project(folder: Path, *, depth: int = 0) -> bool:
    """A notebook or Python file directly inside, or up to `depth` folders down."""
    try:
        with os.scandir(folder) as entries:
            children = list(entries)
    except OSError:
        return False
    if any(e.name.endswith(PROJECT_MARKERS) and e.is_file(follow_symlinks=False) for e in children):
        return True
    return depth > 0 and any(
        looks_like_project(Path(e.path), depth=depth - 1) for e in children
        if e.is_dir(follow_symlinks=False) and e.name not in NEVER_ENTER)
