"""Cleanup rules (data in `rules/*.toml`) and what must stay whatever a rule says.

Three questions, each answered once per entry, cheapest first:
  - `stays_by_name(name)`: protected names (source, notebooks, `.env`, `.git`, tracking stores,
    bare-name keeps). Asked for every entry, inside matched folders too, so it is a few C-level
    string tests (and one compiled regex only when --keep/.platformkeep are given);
  - `stays_by_path(rel)`: keeps matched against the ROOT-relative path and protected paths
    (the run's output, the configured tracking store). Only asked when there are any;
  - `directory_category(parts)` / `file_category(parts)`: which rule matches, asked only
    outside matched folders (a matched folder goes wholesale, no rule test inside it).
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from platform_plugin.checkpoint.manifest import STEP_FOLDER
from platform_plugin.cleanup.tracking_data import store_paths
from platform_plugin.errors import ConfigError
from platform_plugin.util.regular_file import FileTooLarge, NotRegularFile, read_regular_file
from platform_plugin.util.regular_file import read_regular_file, reason
from platform_plugin.util.toml import loads, tomllib

KEEP_FILE = ".platformkeep"
KEEP_FILE_MAX_BYTES = 1 << 20  # a keep list is a few lines; anything bigger is not one
# Never deleted, even when a rule matches: the user's work and the run's configuration.
PROTECTED_SUFFIXES = (".py", ".ipynb", ".sh", ".md")
MAX_RULES_BYTES = 1 << 20  # a rule file is a few globs: far less
PROTECTED_NAMES = frozenset({".env", "platform.toml", KEEP_FILE})
NEVER_ENTER = frozenset({".git"})  # neither walked nor deleted, file or folder
# MLflow's default stores, wherever a run's cwd put them: the sqlite file (and its -wal,
# -shm, -journal, .lock companions), the file store and the artifact folder. Never entered,
# never deleted: their rank logs (`mlartifacts/.../rank_1.log`) would otherwise match `*.log`.
TRACKING_NAMES = frozenset({"mlruns", "mlartifacts"})
TRACKING_PREFIXES = ("mlflow.db",)
STAY_NAMES = PROTECTED_NAMES | NEVER_ENTER | TRACKING_NAMES
# A job's checkpoints (`step-<10 digits>/` of its PLATFORM_CHECKPOINT_DIR: checkpoint/manifest.py)
# are what a restarted or relaunched job resumes from: kept whole unless asked (--checkpoints).
CHECKPOINT_PREFIX = "step-"
CHECKPOINT_CATEGORY = "models"
# what a protected name leaves in "\0" + "\0".join(names) + "\0" (names_that_stay)
_STAY_MARKS = (tuple(f"{suffix}\0" for suffix in PROTECTED_SUFFIXES)
               + tuple(f"\0{name}\0" for name in sorted(STAY_NAMES))
               + tuple(f"\0{prefix}" for prefix in TRACKING_PREFIXES))


def rules_dir() -> Path:
    """The rules are package data (the repository's top-level `cleanup/` is a link to them)."""
    return Path(__file__).parent / "rules"


@dataclass(frozen=True)
class Category:
    name: str
    description: str
    directories: tuple[tuple[str, ...], ...]  # patterns split on "/"
    files: tuple[tuple[str, ...], ...]


def _split(pattern: str) -> tuple[str, ...]:
    return tuple(part for part in pattern.strip("/").split("/") if part)


def _load_category(path: Path) -> Category:
    try:  # as any file others may write (util/regular_file): a FIFO never blocks, a link not followed
        data = loads(read_regular_file(str(path), MAX_RULES_BYTES, within=str(path.parent))
                     .decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cleanup rule file {path} is unreadable: {reason(exc)}",
                          code="CLEAN_RULES") from None
    unknown = set(data) - {"category", "description", "directories", "files"}
    lists = [data.get("directories", []), data.get("files", [])]
    if unknown or not isinstance(data.get("category"), str) or not all(
            isinstance(items, list) and all(isinstance(p, str) and p.strip("/") for p in items)
            for items in lists):
        raise ConfigError(
            f"cleanup rule file {path} must hold category = \"name\", directories = [\"glob\", ...]"
            f" and files = [\"glob\", ...]" + (f" (unknown keys: {sorted(unknown)})" if unknown else ""),
            code="CLEAN_RULES")
    return Category(data["category"], data.get("description", ""),
                    tuple(_split(p) for p in lists[0]), tuple(_split(p) for p in lists[1]))


def load_categories(folder: Path | None = None) -> dict[str, Category]:
    categories = [_load_category(p) for p in sorted((folder or rules_dir()).glob("*.toml"))]
    return {c.name: c for c in categories}


class _PatternIndex:
    """Patterns of one kind (directories or files) -> category, matched on trailing path parts.

    One compiled regex over the last component screens every entry, so a 100,000-file tree
    costs one regex call per name instead of one fnmatch per pattern."""

    def __init__(self, patterns: list[tuple[tuple[str, ...], str]]):
        self._patterns = patterns
        alternatives = "|".join(fnmatch.translate(parts[-1]) for parts, _ in patterns)
        self._screen = re.compile(alternatives) if patterns else None

    def category(self, parts: tuple[str, ...]) -> str | None:
        if self._screen is None or not self._screen.match(parts[-1]):
            return None
        for pattern, category in self._patterns:
            if len(parts) >= len(pattern) and all(
                    fnmatch.fnmatchcase(name, glob)
                    for name, glob in zip(parts[-len(pattern):], pattern)):
                return category
        return None


def _glob_regex(globs: Iterable[str]) -> re.Pattern | None:
    globs = [g.strip().strip("/") for g in globs if g.strip().strip("/")]
    return re.compile("|".join(fnmatch.translate(g) for g in globs)) if globs else None


@dataclass
class CleanupRules:
    """The matcher the walk consults: rule categories, protected names, keeps, protected paths."""

    categories: dict[str, Category]
    keep: tuple[str, ...] = ()  # --keep globs and .platformkeep lines
    protect: tuple[str, ...] = ()  # ROOT-relative paths that must survive, with what is below
    remove_checkpoints: bool = False  # --checkpoints: jobs' step-N/ folders go too
    _dirs: _PatternIndex = field(init=False, repr=False)
    _files: _PatternIndex = field(init=False, repr=False)
    _keep: re.Pattern | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        cats = self.categories.values()
        self._dirs = _PatternIndex([(p, c.name) for c in cats for p in c.directories])
        self._files = _PatternIndex([(p, c.name) for c in cats for p in c.files])
        self._keep = _glob_regex(self.keep)

    @classmethod
    def load(cls, root: Path, *, only: Iterable[str] | None = None, keep: Iterable[str] = (),
             protect: Iterable[Path] = (), folder: Path | None = None,
             environ: Mapping[str, str] | None = None,
             checkpoints: bool = False) -> "CleanupRules":
        categories = load_categories(folder)
        if only:
            wanted = [name.strip() for name in only if name.strip()]
            unknown = [name for name in wanted if name not in categories]
            if unknown:
                raise ConfigError(f"unknown cleanup category {', '.join(unknown)}: choose from "
                                  f"{', '.join(categories)}", code="CLEAN_ONLY")
            categories = {name: categories[name] for name in wanted}
        keep_globs = list(keep) + read_keep_file(root)
        paths = [*protect, *store_paths(root, os.environ if environ is None else environ)]
        inside = (_relative_inside(root, p) for p in paths)
        return cls(categories, tuple(keep_globs), tuple(dict.fromkeys(p for p in inside if p)),
                   remove_checkpoints=checkpoints)

    # --- what the walk asks
    @property
    def checks_paths(self) -> bool:
        """Whether `stays_by_path` can ever say yes (else the walk never builds a path)."""
        return bool(self._keep is not None or self.protect)

    def stays_by_name(self, name: str) -> bool:
        return (name.endswith(PROTECTED_SUFFIXES) or name in STAY_NAMES
                or name.startswith(TRACKING_PREFIXES)
                or (self._keep is not None and self._keep.match(name) is not None)
                or self._is_kept_checkpoint(name))

    def names_that_stay(self, names: list[str]) -> set[str]:
        """`stays_by_name` for a whole folder at once (a matched folder's hot path). A name
        never holds "\\0", so a few substring searches in the "\\0"-joined names tell, exactly,
        whether any protected one is there; the per-name test runs only then."""
        joined = "\0" + "\0".join(names) + "\0"
        found: set[str] = set()
        if any(mark in joined for mark in _STAY_MARKS):
            found = {name for name in names if name.endswith(PROTECTED_SUFFIXES)
                     or name in STAY_NAMES or name.startswith(TRACKING_PREFIXES)}
        if self._keep is not None:
            found.update(name for name in names if self._keep.match(name) is not None)
        if not self.remove_checkpoints and "\0" + CHECKPOINT_PREFIX in joined:
            found.update(name for name in names if self._is_kept_checkpoint(name))
        return found

    def _is_kept_checkpoint(self, name: str) -> bool:
        return (not self.remove_checkpoints and name.startswith(CHECKPOINT_PREFIX)
                and STEP_FOLDER.fullmatch(name) is not None)

    def stays_by_path(self, rel: str) -> bool:
        if self._keep is not None and self._keep.match(rel):
            return True
        # a protected path and everything below it stay; its parent folders are walked (not
        # removed as a whole, since they hold it) so the rest of them can still go
        return any(rel == p or rel.startswith(p + "/") for p in self.protect)

    def must_stay(self, parts: tuple[str, ...]) -> bool:
        return self.stays_by_name(parts[-1]) or (self.checks_paths
                                                 and self.stays_by_path("/".join(parts)))

    def directory_category(self, parts: tuple[str, ...]) -> str | None:
        category = self._dirs.category(parts)
        if (category is None and self.remove_checkpoints and CHECKPOINT_CATEGORY in self.categories
                and STEP_FOLDER.fullmatch(parts[-1]) is not None):
            return CHECKPOINT_CATEGORY  # a checkpoint goes whole, its manifest too
        return category

    def file_category(self, parts: tuple[str, ...]) -> str | None:
        return None if self.is_protected_name(parts[-1]) else self._files.category(parts)

    def link_category(self, parts: tuple[str, ...]) -> str | None:
        # a link is removed as a link (its target is never touched) when its name matches
        return self._files.category(parts) or self._dirs.category(parts)

    def is_protected_name(self, name: str) -> bool:
        return name.endswith(PROTECTED_SUFFIXES) or name in PROTECTED_NAMES


def read_keep_file(root: Path) -> list[str]:
    """`.platformkeep` at ROOT: one glob per line (like --keep), `#` starts a comment.

    It decides what must NOT be deleted, so a keep file that cannot be read as one stops the
    cleanup (exit 2) rather than being ignored: a folder, a fifo or device (a link to
    /dev/zero), more than 1 MiB, or text that is not UTF-8. Read with a bound, never blocking."""
    path = root / KEEP_FILE
    try:
        data = read_regular_file(str(path), KEEP_FILE_MAX_BYTES)
    except FileNotFoundError:
        return []
    except NotRegularFile:
        raise _keep_error(path, "is not a regular file (a folder, fifo, device or a link to one)")
    except FileTooLarge:
        raise _keep_error(path, f"is larger than {KEEP_FILE_MAX_BYTES >> 20} MiB")
    except OSError as exc:
        raise _keep_error(path, f"cannot be read ({exc.strerror or exc})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise _keep_error(path, f"is not UTF-8 text (line {line}, byte {exc.start})")
    return [line.split("#", 1)[0].strip() for line in text.splitlines()
            if line.split("#", 1)[0].strip()]


def _keep_error(path: Path, what: str) -> ConfigError:
    return ConfigError(f"{path} {what}: it lists what cleanup must keep, so nothing was removed;"
                       f" make it a small UTF-8 text file with one glob per line, or remove it",
                       code="CLEAN_KEEP_FILE")


def _relative_inside(root: Path, path: str | os.PathLike) -> str:
    try:
        rel = Path(path).resolve().relative_to(root).as_posix()
    except (ValueError, OSError, RuntimeError):
        return ""  # outside ROOT (cleanup cannot touch it anyway), or unresolvable
    return "" if rel == "." else rel
