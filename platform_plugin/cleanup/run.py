"""Clear operator caches, logs and models from the platform's CODE/ folder.

    root  = find_root(explicit, cwd=...)            # --root > PLATFORM_CODE_DIR > .../CODE > project cwd
    rules = CleanupRules.load(only=..., keep=..., protect=..., root=root)
    report = run_cleanup(root, rules, dry_run=...) # one walk; a dry run makes the same decisions

The rules are data: one TOML file per category in `platform_plugin/cleanup/rules/` (the
repository's top-level `cleanup/` links there, where rules are reviewed). Protected names (source, notebooks,
`.env`, `platform.toml`, `.git/`) are never deleted, whatever a rule says.
"""
from __future__ import annotations

import fnmatch
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from platform_plugin.cleanup.walk import Removal, walk
from platform_plugin.errors import ConfigError
from platform_plugin.util.toml import tomllib

ROOT_ENV = "PLATFORM_CODE_DIR"
KEEP_FILE = ".platformkeep"
# Never deleted, even when a rule matches: the user's work and the run's configuration.
PROTECTED_SUFFIXES = (".py", ".ipynb", ".sh", ".md")
PROTECTED_NAMES = frozenset({".env", "platform.toml", KEEP_FILE})
NEVER_ENTER = frozenset({".git"})  # neither walked nor deleted, file or folder
PROJECT_MARKERS = (".ipynb", ".py")  # what makes a folder "look like a project"
PROGRESS_DELAY_S = 1.0  # a cleanup faster than this shows no counter at all


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
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cleanup rule file {path} is unreadable: {exc}", code="CLEAN_RULES")
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
    protect: tuple[str, ...] = ()  # ROOT-relative paths that must survive (the run's output)
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
             protect: Iterable[Path] = (), folder: Path | None = None) -> "CleanupRules":
        categories = load_categories(folder)
        if only:
            wanted = [name.strip() for name in only if name.strip()]
            unknown = [name for name in wanted if name not in categories]
            if unknown:
                raise ConfigError(f"unknown cleanup category {', '.join(unknown)}: choose from "
                                  f"{', '.join(categories)}", code="CLEAN_ONLY")
            categories = {name: categories[name] for name in wanted}
        keep_globs = list(keep) + read_keep_file(root)
        return cls(categories, tuple(keep_globs), tuple(_relative_inside(root, p) for p in protect
                                                        if _relative_inside(root, p)))

    # --- the Matcher protocol used by cleanup.walk
    def directory_category(self, parts: tuple[str, ...]) -> str | None:
        return self._dirs.category(parts)

    def file_category(self, parts: tuple[str, ...]) -> str | None:
        return None if self.is_protected_name(parts[-1]) else self._files.category(parts)

    def link_category(self, parts: tuple[str, ...]) -> str | None:
        # a link is removed as a link (its target is never touched) when its name matches
        return self.file_category(parts) or self._dirs.category(parts)

    def is_protected_name(self, name: str) -> bool:
        return name.endswith(PROTECTED_SUFFIXES) or name in PROTECTED_NAMES

    def never_enter(self, name: str) -> bool:
        return name in NEVER_ENTER

    def must_stay(self, parts: tuple[str, ...]) -> bool:
        if self.is_protected_name(parts[-1]):
            return True
        if self._keep is None and not self.protect:
            return False  # the common case, kept cheap: it runs for every entry of the tree
        rel = "/".join(parts)
        if self._keep is not None and (self._keep.match(rel) or self._keep.match(parts[-1])):
            return True
        # a protected path and everything below it stay; its parent folders are walked (not
        # removed as a whole, since they hold it) so the rest of them can still go
        return any(rel == p or rel.startswith(p + "/") for p in self.protect)


def read_keep_file(root: Path) -> list[str]:
    """`.platformkeep` at ROOT: one glob per line (like --keep), `#` starts a comment."""
    try:
        text = (root / KEEP_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [line.split("#", 1)[0].strip() for line in text.splitlines()
            if line.split("#", 1)[0].strip()]


def _relative_inside(root: Path, path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return ""  # outside ROOT: cleanup cannot touch it anyway


# ------------------------------------------------------------------ the root

def find_root(explicit: str | os.PathLike | None = None, *, cwd: str | os.PathLike | None = None,
              environ: Mapping[str, str] | None = None) -> Path:
    """ROOT = --root, else $PLATFORM_CODE_DIR, else the nearest ancestor named CODE, else
    the cwd when it looks like a project. Refuses /, the home folder and non-projects."""
    environ = os.environ if environ is None else environ
    start = Path(os.path.abspath(cwd or os.getcwd()))
    if explicit:
        root, how = Path(explicit), "--root"
    elif environ.get(ROOT_ENV):
        root, how = Path(environ[ROOT_ENV]), ROOT_ENV
    else:
        code = next((d for d in (start, *start.parents) if d.name == "CODE"), None)
        root, how = (code, "the nearest folder named CODE") if code else (start, "the cwd")
    root = (start / root).resolve() if not root.is_absolute() else root.resolve()
    if not root.is_dir():
        raise ConfigError(f"cleanup root {root} (from {how}) is not a folder", code="CLEAN_ROOT")
    home = Path(os.path.expanduser("~")).resolve()
    if root == Path(root.anchor) or root == home:
        raise ConfigError(f"refusing to clean {root} (from {how}): it is the "
                          f"{'filesystem root' if root == Path(root.anchor) else 'home folder'};"
                          f" pass --root CODE_DIR or set {ROOT_ENV}", code="CLEAN_ROOT_REFUSED")
    # A folder that was named (CODE, --root, the env) may keep its projects one level down
    # (CODE/exp1/train.py); a bare cwd must be the project itself, so the parent of projects
    # (a home folder, a shared mount) never passes for one.
    if not looks_like_project(root, depth=0 if how == "the cwd" else 1):
        raise ConfigError(f"refusing to clean {root} (from {how}): it holds no notebook or "
                          f"Python source, so it does not look like a CODE/ folder; pass --root "
                          f"CODE_DIR or set {ROOT_ENV}", code="CLEAN_ROOT_REFUSED")
    return root


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


# ------------------------------------------------------------------ walk -> report

@dataclass
class CleanupReport:
    root: Path
    dry_run: bool
    categories: tuple[str, ...]
    removed: list[Removal]  # planned (dry run) or actually removed
    errors: list[str]
    seconds: float

    def totals(self) -> dict[str, tuple[int, int]]:
        """category -> (files, bytes), every category listed even when nothing matched."""
        sums = {name: (0, 0) for name in self.categories}
        for item in self.removed:
            files, size = sums.get(item.category, (0, 0))
            sums[item.category] = (files + item.files, size + item.bytes)
        return sums

    def render(self, *, list_items: bool = False) -> str:
        verb = "would remove" if self.dry_run else "removed"
        lines = [f"cleanup of {self.root} ({'dry run' if self.dry_run else 'done'})"]
        if list_items:
            for item in self.removed:
                suffix = "/" if item.kind == "dir" else ""
                lines.append(f"  {verb} {item.category:<7} {_quote(item.rel)}{suffix}"
                             f"  ({item.files} files, {human_bytes(item.bytes)})")
        lines.append(f"  {'category':<10}{'files':>10}{'size':>12}")
        all_files = all_bytes = 0
        for name, (files, size) in self.totals().items():
            lines.append(f"  {name:<10}{files:>10}{human_bytes(size):>12}")
            all_files += files
            all_bytes += size
        lines.append(f"  {'total':<10}{all_files:>10}{human_bytes(all_bytes):>12}"
                     f"   {verb} in {self.seconds:.2f}s")
        lines += [f"  could not remove {error}" for error in self.errors]
        return "\n".join(lines)


def _quote(rel: str) -> str:
    """Names with newlines or other control characters are shown escaped, one item a line."""
    return rel if rel.isprintable() else repr(rel)


def human_bytes(size: float) -> str:
    if size < 1024:
        return f"{size:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


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
                         time.perf_counter() - started)


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

    def run(self, *, dry_run: bool = False, progress: bool | None = None) -> CleanupReport:
        return run_cleanup(self.root, self.rules, dry_run=dry_run, progress=progress)


def prepare_cleanup(root: Path, *, only: Iterable[str] | None = None, keep: Iterable[str] = (),
                    protect: Iterable[Path] = ()) -> PreparedCleanup:
    return PreparedCleanup(root, CleanupRules.load(root, only=only, keep=keep, protect=protect))


def clean(root: Path, *, only: Iterable[str] | None = None, keep: Iterable[str] = (),
          protect: Iterable[Path] = (), dry_run: bool = False,
          progress: bool | None = None) -> CleanupReport:
    """The whole cleanup in one call (what `platform-run clean` uses)."""
    return prepare_cleanup(root, only=only, keep=keep, protect=protect).run(
        dry_run=dry_run, progress=progress)


__all__ = ["CleanupReport", "CleanupRules", "Category", "Removal",
           "PreparedCleanup", "clean", "find_root", "load_categories", "prepare_cleanup",
           "run_cleanup", "rules_dir"]
