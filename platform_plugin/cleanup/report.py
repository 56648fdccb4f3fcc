"""What a cleanup did (or, for a dry run, would do), as data and as the text the CLI prints."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from platform_plugin.cleanup.walk import Removal

# a folder the user cannot write lists each of its files as an error: the first ones say why
MAX_ERRORS = 20


@dataclass
class CleanupReport:
    root: Path
    dry_run: bool
    categories: tuple[str, ...]
    removed: list[Removal]  # planned (dry run) or actually removed
    errors: list[str]
    seconds: float
    skipped: list[str] = field(default_factory=list)  # other filesystems, mount points
    kept: list[str] = field(default_factory=list)  # tracking data kept whole, with why

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
        lines += [f"  kept {_quote(item)}" for item in self.kept]
        lines += [f"  skipped {_quote(item)}" for item in self.skipped]
        lines += [f"  could not remove {_quote(error)}" for error in self.errors[:MAX_ERRORS]]
        if len(self.errors) > MAX_ERRORS:
            lines.append(f"  ... and {len(self.errors) - MAX_ERRORS} more left in place")
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
