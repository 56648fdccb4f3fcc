"""Launcher scale and spawn path, product and baseline side by side, alternating.

    .venv/bin/python bench/launch_scale.py [--rounds 5] [--sizes 8,32,128] [--no-write]

1. launch() of N no-op Python ranks vs a bare parallel Popen of the same N (the limit), for
   N in --sizes; each side run in a fresh interpreter so neither inherits the other's state.
2. The same at N=8 from a parent holding 300 MiB (a notebook kernel with MindSpore or MLflow
   imported): a spawn path that forks and waits for exec pays for the parent's size, the
   vfork/posix_spawn fast path does not.
3. Peak RSS of the launching process (ru_maxrss) at each N: flat means no per-rank buffers
   that grow with the job.
Results go to docs/benchmarks.md between the bench:launch-scale markers.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import alternate, load_text, spread, write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

# Each side runs in its own interpreter and prints {"s": seconds, "rss_kib": peak RSS}.
SIDE = r"""
import json, resource, subprocess, sys, tempfile, time
n, side, ballast_mib = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ballast = [bytearray(1 << 20) for _ in range(ballast_mib)]  # touched: resident
noop = [sys.executable, "-c", "pass"]
if side == "launch":
    from platform_plugin import launch
start = time.perf_counter()
if side == "bare":
    # own sessions, as the launcher's ranks: with the kernel's autogroup scheduling a session
    # is a scheduling group, so on a loaded machine the two sides would otherwise not get the
    # same share of the CPU
    procs = [subprocess.Popen(noop, stdout=subprocess.DEVNULL, start_new_session=True)
             for _ in range(n)]
    for p in procs:
        p.wait()
else:
    launch(noop, nproc=n, backend="plain", tracking="none", show="none",
           log_dir=tempfile.mkdtemp(prefix="bench_scale_"), write=lambda s: None)
print(json.dumps({"s": time.perf_counter() - start,
                  "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def side(n: int, name: str, ballast_mib: int, rss: list[int]):
    def run() -> float:
        out = subprocess.run([PY, "-c", SIDE, str(n), name, str(ballast_mib)], check=True,
                             capture_output=True, text=True, cwd=REPO).stdout
        data = json.loads(out.strip().splitlines()[-1])
        rss.append(data["rss_kib"])
        return data["s"]
    return run


def measure(n: int, ballast_mib: int, rounds: int) -> dict:
    """Alternating rounds; the time of each side is the one measured inside its interpreter."""
    inner: dict[str, list[float]] = {"bare": [], "launch": []}
    rss: dict[str, list[int]] = {"bare": [], "launch": []}
    runs = {name: side(n, name, ballast_mib, rss[name]) for name in inner}
    alternate({name: (lambda name=name: inner[name].append(runs[name]())) for name in inner},
              rounds)
    return {name: values[1:] for name, values in inner.items()} | {
        "rss": {name: max(values) for name, values in rss.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="8,32,128")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = load_text()
    rows, ratios, rss_values = [], {}, []
    for n in sizes:
        m = measure(n, 0, args.rounds)
        ratio = statistics.median(m["launch"]) / statistics.median(m["bare"])
        ratios[n] = ratio
        rss_values.append(m['rss']['launch'] / 1024)
        rows.append(f"| {n} | {spread(m['bare'])} | {spread(m['launch'])} | {ratio:.2f}x | "
                    f"{m['rss']['launch'] / 1024:.0f} MiB |")
    fat = measure(8, 300, args.rounds)
    fat_ratio = statistics.median(fat["launch"]) / statistics.median(fat["bare"])
    largest = max(sizes)
    lines = [
        "## launch scale", "",
        f"Command: `.venv/bin/python bench/launch_scale.py --rounds {args.rounds} --sizes "
        f"{args.sizes}` — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {load_before} at the start, {load_text()} at the end. "
        "Each side runs in a fresh interpreter and times itself; sides alternate every round; "
        "median (min–max).", "",
        "| ranks | bare parallel Popen | `launch()` | ratio | launcher peak RSS |",
        "|---|---|---|---|---|", *rows, "",
        f"At {largest} ranks: {ratios[largest]:.2f}x bare Popen (goal <= 1.3x: "
        f"{'meets' if ratios[largest] <= 1.3 else 'MISSES'}); launcher RSS "
        f"{min(rss_values):.0f}–{max(rss_values):.0f} MiB from {min(sizes)} to {largest} ranks "
        f"(goal: flat — {'meets' if max(rss_values) <= 1.25 * min(rss_values) else 'MISSES'}).", "",
        "Spawn path from a parent holding 300 MiB (as a kernel with MindSpore imported), 8 ranks: "
        f"bare Popen {spread(fat['bare'])}, `launch()` {spread(fat['launch'])}, ratio "
        f"{fat_ratio:.2f}x. Ranks are spawned without a `preexec_fn`, so CPython keeps its "
        "vfork/posix_spawn path and the spawn cost does not grow with the parent's memory "
        "(with the former PR_SET_PDEATHSIG preexec_fn, 8 spawns of `/bin/true` took 78 ms from "
        "a 20 MiB parent and 253 ms from a 200 MiB one, against 31 and 33 ms without).",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("launch-scale", text)


if __name__ == "__main__":
    main()
