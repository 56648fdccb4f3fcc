"""A restarted job that resumes vs the same job never interrupted, side by side, alternating.

    .venv/bin/python bench/resume.py [--rounds 3] [--epochs 6] [--no-write]

The jobs are the 2-rank test jobs of tests/assets/checkpoint/ (torch DDP on gloo, MindSpore's
dynamic cluster), checkpointing every epoch, through `platform-run launch --max-restarts 1`.
"uninterrupted" runs every epoch in one attempt; "restarted" has rank 1 exit at the end of
the middle epoch of attempt 0, and attempt 1 resumes from the newest complete checkpoint. The
goal (the resume issue's): the restarted job's wall time is less than an uninterrupted run
plus half of it, i.e. the ratio restarted / uninterrupted < 1.5. Every run is checked after the
clock stops: it succeeded, and a restarted one resumed after epoch >= the middle one - 1.
Results go to docs/benchmarks.md between the bench:resume markers.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import alternate, load_text, spread, write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "tests" / "assets" / "checkpoint"
PY = sys.executable
# per framework: the job, launch options, SAMPLES and the steps per epoch and rank they give
JOBS = {"torch": (ASSETS / "torch_resume.py", ["--backend", "torch"], 1600, 100),
        "mindspore": (ASSETS / "ms_resume.py", [], 400, 50)}


def run(framework: str, epochs: int, restarted: bool):
    """One job in a fresh folder; returns its check, run once the clock stopped."""
    script, options, samples, _ = JOBS[framework]
    folder = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    env = {"PATH": f"{Path(PY).parent}:/usr/bin:/bin", "HOME": str(folder),
           "PYTHONPATH": str(REPO), "EPOCHS": str(epochs), "SAMPLES": str(samples)}
    middle = epochs // 2
    if restarted:
        env.update(FAIL_RANK="1", FAIL_EPOCH=str(middle))
    done = subprocess.run([PY, "-m", "platform_plugin", "launch", "--log-dir", str(folder / "logs"),
                           "--tracking", "none", "--nproc", "2", "--max-restarts", "1",
                           "--show", "none", *options, "--", PY, str(script)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)

    def check() -> None:
        try:
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            attempt = 1 if restarted else 0
            report = json.loads((folder / "out" / f"attempt{attempt}_rank0.json").read_text())
            start = report.get("initial_epoch", report.get("start"))
            assert (start >= middle - 1) if restarted else start == 0, report
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return check


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_before = load_text()
    rows, verdicts, medians = [], [], []
    for framework in JOBS:
        times = alternate({"uninterrupted": lambda f=framework: run(f, args.epochs, False),
                           "restarted": lambda f=framework: run(f, args.epochs, True)}, args.rounds)
        ratios = [r / u for r, u in zip(times["restarted"], times["uninterrupted"])]
        ratio = statistics.median(ratios)
        rows.append(f"| {framework} | {spread(times['uninterrupted'], digits=1)} | "
                    f"{spread(times['restarted'], digits=1)} | {ratio:.2f}x "
                    f"({min(ratios):.2f}–{max(ratios):.2f}) |")
        medians.append(ratio)
        verdicts.append(f"{framework} {ratio:.2f}x (its worst round {max(ratios):.2f}x)")
        print(rows[-1], flush=True)
    steps = ", ".join(f"{framework}: {job[3]} steps per epoch and rank" for framework, job in JOBS.items())
    worst = max(medians)
    lines = [
        "## resume", "",
        f"Command: `.venv/bin/python bench/resume.py --rounds {args.rounds} --epochs "
        f"{args.epochs}` — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {load_before} "
        f"at the start, {load_text()} at the end (a shared machine: absolute times are noisy).", "",
        f"2-rank jobs of {args.epochs} epochs ({steps}) through `platform-run "
        "launch --max-restarts 1`, checkpointing every epoch (`platform_plugin.checkpoint`); "
        f"\"restarted\": rank 1 exits at the end of epoch {args.epochs // 2} of the first attempt, "
        "the second attempt starts after the newest complete checkpoint. One warm-up each, then "
        "the sides alternate every round; wall time of the whole `platform-run launch`, median "
        "(min–max); the ratio is per round, then the median.", "",
        "| job | uninterrupted | restarted (resumed) | restarted / uninterrupted |",
        "|---|---|---|---|", *rows, "",
        f"A restarted job that resumes: {', '.join(verdicts)} of the uninterrupted run (goal < "
        f"1.5x in the median, an uninterrupted run plus half of it: "
        f"{'meets' if worst < 1.5 else 'MISSES'}).", "",
        "What the restart adds is the stop of the failed attempt, a second start of every "
        "process (the framework's import and collectives' setup) and the epoch lost between the "
        "last checkpoint and the failure.",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("resume", text)


if __name__ == "__main__":
    main()
