"""Benchmark: `platform-run clean` on a 100,000-file cache tree vs `rm -rf` of the same folders.

Both sides run as subprocesses on identical freshly built trees, alternated ABAB so machine
noise hits both; medians and their ratio are printed and written to docs/benchmarks.md
(section `cleanup`). Goal: ratio <= 1.2.

    .venv/bin/python bench/cleanup.py [--files 100000] [--rounds 5]
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

BENCH_DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"

# The shape of a real CODE/ after a few distributed runs: per-rank kernel_meta and graph
# caches, IR dumps, __pycache__, next to the user's source.
CACHE_DIRS = [f"rank_{r}/kernel_meta" for r in range(8)] + \
             [f"rank_{r}/graph_cache" for r in range(8)] + \
             ["kernel_meta", "somas_meta", "verbose_ir_files", "src/__pycache__"]
SUBDIRS_PER_CACHE = 25


def write_section(name: str, body: str, doc: Path = BENCH_DOC) -> None:
    """Replace this benchmark's section between its markers; other sections are untouched
    (the file is re-read right before writing since other benchmarks write theirs too)."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    block = f"{start}\n{body.strip()}\n{end}"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + f"\n\n## {name}\n\n{block}\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")


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


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    product, baseline = [], []
    with tempfile.TemporaryDirectory(prefix="bench-cleanup-") as tmp:
        for round_no in range(args.rounds):
            for side in ("product", "baseline") if round_no % 2 == 0 else ("baseline", "product"):
                root = Path(tmp) / "CODE"
                folders = build_tree(root, args.files)
                subprocess.run(["sync"], check=False)
                if side == "product":
                    product.append(timed([sys.executable, "-m", "platform_plugin", "clean",
                                          "--root", str(root), "--no-progress"]))
                    left = [d for d in folders if os.path.exists(d)]
                    assert not left, f"cleanup left {left}"
                else:
                    baseline.append(timed(["rm", "-rf", *folders]))
                assert (root / "train.py").exists()
                shutil.rmtree(root)
            print(f"round {round_no + 1}: platform-run clean {product[-1]:.2f}s, "
                  f"rm -rf {baseline[-1]:.2f}s", flush=True)
    p, b = statistics.median(product), statistics.median(baseline)
    command = f".venv/bin/python bench/cleanup.py --files {args.files} --rounds {args.rounds}"
    lines = [
        f"Cleanup of a {args.files:,}-file cache tree ({len(CACHE_DIRS)} cache folders, "
        f"{len(CACHE_DIRS) * SUBDIRS_PER_CACHE} subfolders) — `{command}`, "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"{args.rounds} rounds alternated ABAB, medians:",
        "",
        "| | median (s) | all runs (s) |",
        "|---|---|---|",
        f"| `platform-run clean` (subprocess: startup + plan + delete) | {p:.2f} | "
        f"{', '.join(f'{x:.2f}' for x in product)} |",
        f"| `rm -rf` of the same folders | {b:.2f} | {', '.join(f'{x:.2f}' for x in baseline)} |",
        "",
        f"Ratio {p / b:.2f}× (goal ≤ 1.2×).",
    ]
    print("\n".join(lines))
    write_section("cleanup", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
