"""Benchmark: `platform-run clean` on a 100,000-file cache tree vs `rm -rf` of the same folders.

Both sides run as subprocesses on identical freshly built trees, alternated ABAB so machine
noise hits both; medians and their ratio are printed and written to docs/benchmarks.md
(section `cleanup`). Goal: ratio <= 1.2.

    .venv/bin/python bench/cleanup.py [--files 100000] [--rounds 7] [--disk-rounds 3]
                                      [--dirs /dev/shm,/tmp]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchdoc import write_section  # bench/benchdoc.py


# The shape of a real CODE/ after a few distributed runs: per-rank kernel_meta and graph
# caches, IR dumps, __pycache__, next to the user's source.
CACHE_DIRS = [f"rank_{r}/kernel_meta" for r in range(8)] + \
             [f"rank_{r}/graph_cache" for r in range(8)] + \
             ["kernel_meta", "somas_meta", "verbose_ir_files", "src/__pycache__"]
SUBDIRS_PER_CACHE = 25


def build_tree(root: Path, files: int) -> list[str]:
    """Create the tree; returns the top-level cache folders (what rm -rf is given)."""
    (root / "src").mkdir(parents=True)
    for name in ("train.py", "src/model.py", "notebook.ipynb"):
        (root / name).write_text("# user code\n")
    leaves = [root / d / f"op_{i:03d}" for d in CACHE_DIRS for i in range(SUBDIRS_PER_CACHE)]
    payload = b"x" * 256
    per_leaf, extra = divmod(files, len(leaves))
    for index, leaf in enumerate(leaves):
        leaf.mkdir(parents=True)
        for i in range(per_leaf + (1 if index < extra else 0)):
            fd = os.open(leaf / f"kernel_{i}.o", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, payload)
            os.close(fd)
    return [str(root / d) for d in CACHE_DIRS]


def _fs_type(path: str | None) -> str:
    done = subprocess.run(["df", "--output=fstype", path or tempfile.gettempdir()],
                          capture_output=True, text=True)
    return done.stdout.split()[-1] if done.returncode == 0 else "unknown filesystem"


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def timed_in_process(root: Path) -> float:
    """The walk alone, without an interpreter start: where the rest of the time goes."""
    from platform_plugin.cleanup import run as cleanup

    started = time.perf_counter()
    report = cleanup.clean(root, progress=False)
    assert not report.errors, report.errors
    return time.perf_counter() - started


SIDES = {  # name -> how to time it on a freshly built tree
    "platform-run clean": lambda root, folders: timed(
        [sys.executable, "-m", "platform_plugin", "clean", "--root", str(root), "--no-progress"]),
    "rm -rf": lambda root, folders: timed(["rm", "-rf", *folders]),
    "cleanup.clean() in-process": lambda root, folders: timed_in_process(root),
}


def measure(folder: str, files: int, rounds: int, sides: list[str]) -> dict[str, list[float]]:
    """Rounds in `folder`, the order of the sides reversed every other round (ABAB)."""
    times: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="bench-cleanup-", dir=folder) as tmp:
        for round_no in range(rounds):
            for side in sides if round_no % 2 == 0 else list(reversed(sides)):
                root = Path(tmp) / "CODE"
                folders = build_tree(root, files)
                subprocess.run(["sync"], check=False)  # the build's writeback is not timed
                times[side].append(SIDES[side](root, folders))
                left = [d for d in folders if os.path.exists(d)]
                assert not left and (root / "train.py").exists(), f"{side} left {left}"
                shutil.rmtree(root)
            print(f"{folder} round {round_no + 1}: " + ", ".join(
                f"{side} {times[side][-1]:.2f}s" for side in sides), flush=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7, help="rounds on a tmpfs")
    parser.add_argument("--disk-rounds", type=int, default=3,
                        help="rounds elsewhere (each builds 100,000 files on disk: slow)")
    parser.add_argument("--dirs", default="/dev/shm,/tmp",
                        help="comma-separated folders to build the trees in (default: a tmpfs, "
                             "where only the tools' own work counts, and the disk, like CODE/)")
    args = parser.parse_args()
    folders = [d for d in args.dirs.split(",") if os.path.isdir(d)]
    command = (f".venv/bin/python bench/cleanup.py --files {args.files} --rounds {args.rounds}"
               f" --disk-rounds {args.disk_rounds} --dirs {','.join(folders)}")
    lines = [
        f"Cleanup of a {args.files:,}-file cache tree ({len(CACHE_DIRS)} cache folders, "
        f"{len(CACHE_DIRS) * SUBDIRS_PER_CACHE} subfolders, 256-byte files) — `{command}`, "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores shared with "
        f"other jobs; {args.rounds} rounds on tmpfs, {args.disk_rounds} on disk, order "
        f"reversed every round (ABAB), a fresh tree for each run, "
        f"medians. `platform-run clean` is a subprocess: interpreter start, rules, one walk that "
        f"decides every entry (stat for the byte count) and removes it; the in-process column "
        f"times `cleanup.clean()` alone (no interpreter start, no CLI imports).",
        "",
        "| trees in | `platform-run clean` median (s) | `rm -rf` median (s) | ratio | "
        "in-process walk median (s), ratio | all runs clean / rm (s) |",
        "|---|---|---|---|---|---|",
    ]
    for folder in folders:
        tmpfs = _fs_type(folder) == "tmpfs"
        sides = list(SIDES) if tmpfs else list(SIDES)[:2]  # disk rounds are slow: 2 sides
        times = measure(folder, args.files, args.rounds if tmpfs else args.disk_rounds, sides)
        p, b = (statistics.median(times[side]) for side in sides[:2])
        walk = (f"{statistics.median(times[sides[2]]):.2f}, "
                f"{statistics.median(times[sides[2]]) / b:.2f}×" if tmpfs else "—")
        lines.append(f"| {folder} ({_fs_type(folder)}) | {p:.2f} | {b:.2f} | **{p / b:.2f}×** | "
                     f"{walk} | {', '.join(f'{x:.2f}' for x in times[sides[0]])} / "
                     f"{', '.join(f'{x:.2f}' for x in times[sides[1]])} |")
    lines += ["", "Goal: ratio ≤ 1.2×. What `rm -rf` does not do: start Python and import the "
              "CLI (~0.15 s), and `lstat` every file for the byte count the report shows; the "
              "rest is one `unlinkat` per file, as in `rm -rf`. On a shared disk the variance "
              "of both sides is larger than the difference."]
    print("\n".join(lines))
    write_section("cleanup", "\n".join(["## cleanup", "", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
