"""Clear operator caches, logs and models from the platform's CODE/ folder.

    root  = find_root(explicit, cwd=...)            # root.py: --root > PLATFORM_CODE_DIR > .../CODE > cwd
    rules = CleanupRules.load(root, only=..., keep=..., protect=...)   # rules.py
    report = run_cleanup(root, rules, dry_run=...) # walk.py: one walk; a dry run decides the same

The rules are data: one TOML file per category in `platform_plugin/cleanup/rules/` (the
repository's top-level `cleanup/` links there, where rules are reviewed). Protected names
(source, notebooks, `.env`, `platform.toml`, `.git/`, tracking stores) are never deleted,
whatever a rule says; other filesystems are never entered; spools with undelivered records
are kept (tracking_data.py).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from platform_plugin.folder_locks.cleanup import CleanupLock
from platform_plugin.cleanup.report import CleanupReport, human_bytes
from platform_plugin.cleanup.root import ROOT_ENV, find_root, looks_like_project
from platform_plugin.cleanup.rules import (KEEP_FILE, Category, CleanupRules, load_categories,
                                           read_keep_file, rules_dir)
from platform_plugin.cleanup.walk import Removal, walk
from platform_plugin.errors import ConfigError

PROGRESS_DELAY_S = 1.0  # a cleanup faster than this shows no counter at all


def run_cleanup(root: Path, rules: CleanupRules, *, dry_run: bool = False,
                progress: bool | None = None) -> CleanupReport:
    """Walk ROOT once: decide every entry, and remove unless `dry_run` (same walk, same
    decisions, so a dry run lists exactly what a real run removes). `progress=None`: a
    counter on stderr when it is a terminal and the cleanup takes more than a second."""
    started = time.perf_counter()
    bar = None if dry_run else _progress_bar(progress)
    try:
        result = walk(root, rules, remove=not dry_run, progress=bar.update if bar else None)
    finally:
        if bar:
            bar.close()
    return CleanupReport(root, dry_run, tuple(rules.categories), result.removals, result.errors,
                         time.perf_counter() - started, result.skipped, result.kept)


def _progress_bar(wanted: bool | None):
    if wanted is False or (wanted is None and not sys.stderr.isatty()):
        return None
    from tqdm import tqdm  # only interactive cleanups pay for the import

    # the total is unknown until the walk ends; `delay` keeps small cleanups silent
    return tqdm(unit=" files", desc="cleaning", file=sys.stderr, leave=False,
                delay=0 if wanted else PROGRESS_DELAY_S)


@dataclass(frozen=True)
class PreparedCleanup:
    """ROOT and rules checked before anything runs, so a full run refuses a bad cleanup
    before its notebook starts."""

    root: Path
    rules: CleanupRules

    def run(self, *, dry_run: bool = False, progress: bool | None = None,
            lock: CleanupLock | None = None) -> CleanupReport:
        """A real run holds CODE/'s locks (folder_locks/cleanup.py): `lock` when the caller holds
        them already (a full run), else its own for the cleanup's duration."""
        if dry_run:
            return run_cleanup(self.root, self.rules, dry_run=True, progress=progress)
        refuse_read_only(self.root)
        own = None if lock else CleanupLock.take(self.root)
        try:
            return run_cleanup(self.root, self.rules, dry_run=False, progress=progress)
        finally:
            if own:
                own.release()


def refuse_read_only(root: Path) -> None:
    """A ROOT on a read-only mount: nothing can be removed, so say it once and remove
    nothing, instead of one "could not remove" line per file (100,000 for a real cache).
    A dry run still lists what a writable CODE/ would lose."""
    try:
        read_only = bool(os.statvfs(root).f_flag & os.ST_RDONLY)
    except OSError:
        return  # the walk reports what it cannot read
    if read_only:
        raise ConfigError(f"{root} is on a read-only mount: nothing can be removed there "
                          "(`--dry-run` lists what would go on a writable CODE/; a full run "
                          "takes --no-cleanup)", code="CLEAN_ROOT_READONLY")


def prepare_cleanup(root: Path, *, only: Iterable[str] | None = None, keep: Iterable[str] = (),
                    protect: Iterable[Path] = (), checkpoints: bool = False) -> PreparedCleanup:
    """`checkpoints`: also remove jobs' checkpoint folders (kept otherwise)."""
    return PreparedCleanup(root, CleanupRules.load(root, only=only, keep=keep, protect=protect,
                                                   checkpoints=checkpoints))


def clean(root: Path, *, only: Iterable[str] | None = None, keep: Iterable[str] = (),
          protect: Iterable[Path] = (), dry_run: bool = False,
          progress: bool | None = None, checkpoints: bool = False) -> CleanupReport:
    """The whole cleanup in one call (what `platform-run clean` uses)."""
    return prepare_cleanup(root, only=only, keep=keep, protect=protect,
                           checkpoints=checkpoints).run(dry_run=dry_run, progress=progress)


__all__ = ["CleanupReport", "CleanupRules", "Category", "Removal", "KEEP_FILE", "ROOT_ENV",
           "PreparedCleanup", "clean", "find_root", "human_bytes", "load_categories",
           "looks_like_project", "prepare_cleanup", "read_keep_file", "run_cleanup", "rules_dir"]
