"""`platform-run init [DIR]`: write the starter files into the project folder (CODE/).

The templates ship in the wheel (`platform_plugin/templates/`, package data), so a pip user
gets the same files as a clone of the repository. Existing files are kept unless --force.
"""
from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path


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
    parser.add_argument("dir", nargs="?", metavar="DIR",
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
    from platform_plugin.util.folders import check_writable_folder
    folder = str(target)  # a file at DIR or on the way, or a read-only place: refused before any write
    check_writable_folder(folder, "project", "INIT_DIR", "DIR")
    target.mkdir(parents=True, exist_ok=True)
    done = []
    for name in FILES:
        dest = target / name
        if dest.exists() and not force:
            done.append((name, "kept (exists; --force overwrites)"))
            continue
        shutil.copyfile(TEMPLATES / name, dest)
        if name.endswith(".sh"):
            dest.chmod(0o755)
        done.append((name, "written"))
    return done


def run(args: argparse.Namespace) -> int:
    target = project_dir(args.dir)
    for name, what in write_templates(target, force=args.force):
        print(f"  {name:<16} {what}")
    print(f"project folder: {target}\nnext: put your train.py there, then "
          "`platform-run debug notebook.ipynb` (or open the notebook in JupyterLab)")
    return 0
