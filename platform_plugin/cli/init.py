"""`platform-run init [DIR]`: write the starter files into the project folder (CODE/).

The templates ship in the wheel (`platform_plugin/templates/`, package data), so a pip user
gets the same files as a clone of the repository. Existing files are kept unless --force.
"""
from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.folders import check_writable_folder
from platform_plugin.util.paths import checked_path


TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
FILES = ("platform.toml", ".env.example", "notebook.ipynb", "run.sh")
ROOT_ENV = "PLATFORM_CODE_DIR"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "init", help="write the starter files (platform.toml, .env.example, notebook, run.sh)",
        description="Write the starter files into the project folder: platform.toml (parameter "
                    "profiles of the debug and full runs), .env.example (your settings; which "
                    "variables the platform owns), notebook.ipynb (parameters cell + %%dist_run) "
                    "and run.sh (the platform's shell loop as one platform-run launch line). "
                    "Existing files are kept unless --force.")
    parser.add_argument("dir", nargs="?", metavar="DIR", type=checked_path("CLI_PATH", "DIR"),
                        help=f"project folder (default: ${ROOT_ENV}, else the nearest ancestor "
                             "named CODE, else the current folder)")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")
    parser.set_defaults(func=run)


def project_dir(explicit: str | None, cwd: Path | None = None) -> Path:
    if explicit:
        return Path(explicit).resolve()
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV]).resolve()
    here = (cwd or Path.cwd()).resolve()
    return next((p for p in (here, *here.parents) if p.name == "CODE"), here)


def write_templates(target: Path, *, force: bool = False) -> list[tuple[str, str]]:
    """[(file, "written" | "kept")] for every template."""
    folder = str(target)  # a file at DIR or on the way, or a read-only place: refused before any write
    check_writable_folder(folder, "project", "INIT_DIR", "DIR")
    _check_destinations(target, force)
    target.mkdir(parents=True, exist_ok=True)
    done = []
    for name in FILES:
        dest = target / name
        if dest.exists() and not force:
            done.append((name, "kept (exists; --force overwrites)"))
            continue
        _write(TEMPLATES / name, dest, 0o755 if name.endswith(".sh") else 0o644)
        done.append((name, "written"))
    return done


def _check_destinations(target: Path, force: bool) -> None:
    """Every place a template will be written is free or a regular file, checked before the
    first write: a FIFO, folder or link there was a traceback from shutil after the files
    before it were written, and a link was written through (a dangling `platform.toml ->
    /elsewhere` made /elsewhere). What is kept (it exists, no --force) may be anything."""
    bad = []
    for name in FILES:
        path = target / name
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not stat.S_ISREG(mode) and (force or not path.exists()):
            bad.append(Problem("INIT_FILE_NOT_REGULAR", f"{path} is there and is not a regular "
                               "file (a folder, FIFO, device or symbolic link): remove it or "
                               "choose another folder; nothing was written", name))
    if bad:
        raise ConfigError(bad)


def _write(source: Path, dest: Path, mode: int) -> None:
    """The template's bytes into dest, never through a link put there meanwhile."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(source.read_bytes())
    if mode & 0o111:  # run.sh (an existing file keeps its mode otherwise, as with copyfile)
        os.chmod(dest, mode)


def run(args: argparse.Namespace) -> int:
    target = project_dir(args.dir)
    for name, what in write_templates(target, force=args.force):
        print(f"  {name:<16} {what}")
    print(f"project folder: {target}\nnext: put your train.py there, then "
          "`platform-run debug notebook.ipynb` (or open the notebook in JupyterLab)")
    return 0
