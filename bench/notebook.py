"""Benchmark: `platform-run full` on a trivial notebook (cleanup excluded) vs the papermill CLI.

Both run as subprocesses on the same notebook, alternated ABAB; medians and their ratio are
printed and written to docs/benchmarks.md (section `notebook`). Goal: ratio <= 1.15.

    .venv/bin/python bench/notebook.py [--rounds 11]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdoc import write_section  # noqa: E402

VENV_BIN = Path(sys.executable).parent


def trivial_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    params = nbformat.v4.new_code_cell("epochs = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("print('epochs', epochs)")]
    nbformat.write(nb, path)
    return path


def timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-notebook-") as tmp:
        project = Path(tmp)
        trivial_notebook(project / "trivial.ipynb")
        sides = {
            "product": [sys.executable, "-m", "platform_plugin", "full", "trivial.ipynb",
                        "--no-cleanup", "--output", "out-product.ipynb"],
            # the same work: one injected parameter, output written, run in the project
            "baseline": [str(VENV_BIN / "papermill"), "trivial.ipynb", "out-papermill.ipynb",
                         "-p", "platform_mode", "full", "--cwd", str(project)],
        }
        times: dict[str, list[float]] = {"product": [], "baseline": []}
        timed(sides["baseline"], project)  # warm the page cache for both sides alike
        for round_no in range(args.rounds):
            order = ("product", "baseline") if round_no % 2 == 0 else ("baseline", "product")
            for side in order:
                times[side].append(timed(sides[side], project))
            print(f"round {round_no + 1}: platform-run full {times['product'][-1]:.2f}s, "
                  f"papermill {times['baseline'][-1]:.2f}s", flush=True)
    p, b = statistics.median(times["product"]), statistics.median(times["baseline"])
    command = f".venv/bin/python bench/notebook.py --rounds {args.rounds}"
    lines = [
        f"A trivial two-cell notebook — `{command}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M}"
        f" UTC, {os.cpu_count()} cores shared with other jobs, {args.rounds} rounds alternated "
        f"ABAB, medians (each includes interpreter start, kernel start and shutdown):",
        "",
        "| | median (s) | all runs (s) |",
        "|---|---|---|",
        f"| `platform-run full trivial.ipynb --no-cleanup` | {p:.2f} | "
        f"{', '.join(f'{x:.2f}' for x in times['product'])} |",
        f"| `papermill trivial.ipynb out.ipynb -p platform_mode full` | {b:.2f} | "
        f"{', '.join(f'{x:.2f}' for x in times['baseline'])} |",
        "",
        f"Ratio {p / b:.2f}× (goal ≤ 1.15×). Runs near 4.5 s on either side are jupyter_client's "
        f"graceful kernel shutdown waiting out half of `shutdown_wait_time` (it happens to the "
        f"papermill CLI as often); the median is robust to them.",
    ]
    print("\n".join(lines))
    write_section("notebook", "\n".join(["## notebook", "", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
