"""`platform-run clean`: remove operator caches, logs and models from CODE/."""
from __future__ import annotations

import argparse

from platform_plugin.cleanup import run as cleanup
from platform_plugin.util.paths import checked_path


def add_cleanup_options(parser: argparse.ArgumentParser) -> None:
    """Options shared with `platform-run full` (which cleans before it runs)."""
    parser.add_argument("--only", metavar="CATEGORIES", type=_categories,
                        help="comma-separated categories to clean (default: all of "
                             "caches,logs,models)")
    parser.add_argument("--keep", metavar="GLOB", action="append", default=[],
                        help="never remove paths matching GLOB (relative to the root or a bare "
                             "name; repeatable; adds to the root's .platformkeep)")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "clean", help="remove operator caches, logs and models from CODE/",
        description="Remove operator caches, logs and models from the platform's CODE/ folder. "
                    "Source, notebooks, .env, platform.toml and .git/ are never removed.")
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `platform-run clean`, also those of `%platform_clean`."""
    parser.add_argument("--root", metavar="DIR", type=checked_path("CLEAN_ROOT", "--root"),
                        help=f"folder to clean (default: ${cleanup.ROOT_ENV}, else the nearest "
                             "ancestor named CODE, else the current folder if it holds a "
                             "notebook or Python source)")
    add_cleanup_options(parser)
    parser.add_argument("--checkpoints", action="store_true",
                        help="also remove jobs' checkpoints (the step-N/ folders of "
                             "PLATFORM_CHECKPOINT_DIR, kept otherwise: a restarted job resumes "
                             "from them)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list exactly what would be removed and remove nothing")
    parser.add_argument("--list", action="store_true", dest="list_items",
                        help="list every removed item (always on with --dry-run)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                        help="never show a progress bar")


def run(args: argparse.Namespace) -> int:
    root = cleanup.find_root(args.root)
    report = cleanup.clean(root, only=args.only, keep=args.keep, dry_run=args.dry_run,
                           progress=args.progress, checkpoints=args.checkpoints)
    print(report.render(list_items=args.dry_run or args.list_items))
    return 1 if report.errors else 0


def _categories(value: str) -> list[str]:
    """`--only ''` (an empty shell variable) named no category: refused, never "all"."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{value!r} names no category: give one or more of "
                                         "caches,logs,models, or leave --only out to clean all")
    return names
