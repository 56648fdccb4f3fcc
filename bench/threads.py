"""The DDP tutorial job under torchrun and under platform-run launch, side by side, alternating.

    .venv/bin/python bench/threads.py [--rounds 7] [--epochs 6] [--samples 4096] [--no-write]

The job is tests/assets/launch/ddp_tutorial.py: a script written as pytorch/examples'
ddp-tutorial-series/multigpu_torchrun.py is (LOCAL_RANK, RANK, WORLD_SIZE, DDP on gloo, a
synthetic dataset), 2 ranks on this server, started unchanged by both launchers with torchrun's
command line. Nobody sets OMP_NUM_THREADS: torchrun gives each rank 1, platform-run the cores
divided among the local ranks (launcher/planning/threads.py). Every run starts in a fresh folder
(no snapshot to resume) and is checked after the clock stops: exit 0 and the last epoch printed
by both ranks. Goal: platform-run / torchrun <= 1.05 in the median. Results go to
docs/benchmarks.md between the bench:threads markers.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchdoc import alternate, load_text, spread, write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "assets" / "launch" / "ddp_tutorial.py"
PY = sys.executable
TORCHRUN = str(Path(PY).parent / "torchrun")
GOAL = 1.05


def run(launcher: list[str], epochs: int, samples: int):
    folder = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(HOME=str(folder), PYTHONPATH=str(REPO))
    done = subprocess.run([*launcher, str(SCRIPT), str(epochs), str(epochs),
                           "--samples", str(samples)], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=900)

    def check() -> None:
        try:
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            for rank in (0, 1):
                assert f"[GPU{rank}] Epoch {epochs - 1} |" in done.stdout + done.stderr
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return check


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    flags = ["--standalone", "--nproc-per-node", "2"]
    sides = {"torchrun": [TORCHRUN, *flags],
             "platform-run": [PY, "-m", "platform_plugin", "launch", "--tracking", "none",
                              *flags, "--", PY]}
    load_before = load_text()
    times = alternate({name: (lambda cmd=cmd: run(cmd, args.epochs, args.samples))
                       for name, cmd in sides.items()}, args.rounds)
    ratios = [p / t for p, t in zip(times["platform-run"], times["torchrun"])]
    ratio = statistics.median(times["platform-run"]) / statistics.median(times["torchrun"])
    verdict = (f"DDP tutorial, 2 ranks, nobody's OMP_NUM_THREADS: platform-run / torchrun = "
               f"{ratio:.2f}x (goal <= {GOAL}x: {'meets' if ratio <= GOAL else 'MISSES'})")
    command = (f".venv/bin/python bench/threads.py --rounds {args.rounds} --epochs {args.epochs}"
               f" --samples {args.samples}")
    body = "\n".join([
        "## threads", "",
        f"Command: `{command}` — {load_before} before, {load_text()} after "
        "(a shared machine: other jobs ran meanwhile).", "",
        f"`tests/assets/launch/ddp_tutorial.py {args.epochs} {args.epochs} --samples "
        f"{args.samples}` (written as pytorch/examples' ddp-tutorial-series/"
        "multigpu_torchrun.py is; DDP on gloo) with torchrun's command line "
        "`--standalone --nproc-per-node 2`, each launcher in turn, alternating, "
        f"{args.rounds} rounds after one warm-up each; no OMP_NUM_THREADS from the user, so "
        "torchrun gives each rank 1 and platform-run the cores divided among the ranks "
        f"({os.cpu_count()} cores / 2 ranks = {max(1, (os.cpu_count() or 1) // 2)} here):", "",
        "| launcher | wall s, median (min–max) |", "|---|---|",
        *(f"| {name} | {spread(values)} |" for name, values in times.items()), "",
        f"Per-round ratios: {', '.join(f'{r:.2f}' for r in ratios)}.", "",
        verdict + ".", "",
        "On this 2-core machine the two defaults are the same number (1), so the benchmark "
        "shows that the launcher now gives the ranks torchrun's thread count, not which default "
        "wins on a server with more cores than ranks: there the cores' share keeps every core "
        "busy where 1 leaves all but one per rank idle."])
    print(body)
    if not args.no_write:
        write_section("threads", body)


if __name__ == "__main__":
    main()
