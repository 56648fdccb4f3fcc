"""Cost of following a job from its folder (launcher/jobs/): what a background job's board costs
the kernel, and how soon `attach` shows its first board of a job with long logs. Writes the
`jobs` section of docs/benchmarks.md.

    .venv/bin/python bench/jobs.py --rounds 5 --seconds 20

Board: a detached 8-rank job whose ranks print a line every 0.2 s (`platform-run launch
--detach`, tests/assets/launch/behave.py chatty) is followed by `LiveBoard` in a thread of this
process for `--seconds`, its bundles serialized as ipykernel would send them (json.dumps); the
CPU this process used meanwhile (getrusage) over the wall time is the board's share of a core.
Rounds alternate with an idle wait of the same length (what the process costs without a board).

Attach: 8 rank logs of 125,000 lines each (1,000,000 lines, ~30 MB) and a job.json; the first
board (`JobFollower.refresh()` + the board's text and HTML) against reading every log whole and
counting its lines (what following from the start costs), and the first board of 8 logs just
within the bound under which their lines are counted, alternating, the page cache warm.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdoc import alternate, spread, write_section  # noqa: E402  (bench/benchdoc.py)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from platform_plugin.launcher.jobs.live import LiveBoard, bundle  # noqa: E402
from platform_plugin.launcher.jobs.follow import COUNT_LIMIT, JobFollower  # noqa: E402
from platform_plugin.launcher.jobs.records import read_record  # noqa: E402
from platform_plugin.launcher.jobs.stopping import request_stop, wait_ended  # noqa: E402

BEHAVE = REPO / "tests" / "assets" / "launch" / "behave.py"
RANKS = 8
LINES = 1_000_000
COUNTED = f"first board, logs of {COUNT_LIMIT >> 20} MiB (lines counted)"


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def board_share(job_dir: str, seconds: float) -> float:
    """Fraction of a core this process spent while a LiveBoard followed the job."""
    sent = []
    board = LiveBoard(job_dir, lambda data: sent.append(len(json.dumps(data))))
    start_cpu, start = cpu_s(), time.monotonic()
    thread = threading.Thread(target=board.follow, daemon=True)
    thread.start()
    time.sleep(seconds)
    board.stopped.set()
    thread.join()
    return (cpu_s() - start_cpu) / (time.monotonic() - start)


def idle_share(seconds: float) -> float:
    start_cpu, start = cpu_s(), time.monotonic()
    time.sleep(seconds)
    return (cpu_s() - start_cpu) / (time.monotonic() - start)


def bench_board(rounds: int, seconds: float, work: Path) -> dict:
    logs = work / "logs"
    done = subprocess.run([sys.executable, "-m", "platform_plugin", "launch", "--detach",
                           "--log-dir", str(logs), "--nproc", str(RANKS), "--tracking", "none",
                           "--grace", "1", "--", sys.executable, str(BEHAVE), "chatty"],
                          capture_output=True, text=True, check=True, cwd=work,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    job_dir = str(logs / done.stdout.split()[-1])
    try:
        while read_record(job_dir).data is None:
            time.sleep(0.1)
        shares: dict[str, list[float]] = {"board": [], "idle": []}
        for round_no in range(rounds):
            order = ("board", "idle") if round_no % 2 == 0 else ("idle", "board")
            for side in order:
                shares[side].append(board_share(job_dir, seconds) if side == "board"
                                    else idle_share(seconds))
        return shares
    finally:
        request_stop(read_record(job_dir))
        wait_ended(job_dir, 60)


def make_long_job(folder: Path, log_bytes: int | None = None) -> str:
    """8 rank logs of LINES // RANKS lines each, or of `log_bytes` each."""
    job_dir = folder / "long-20260101-000000-abcd"
    job_dir.mkdir(parents=True)
    for rank in range(RANKS):
        with open(job_dir / f"rank_{rank}.log", "wb") as fh:
            block = b"".join(b"rank %d step %d loss 0.%06d and some words\n" % (rank, i, i)
                             for i in range(LINES // RANKS))
            fh.write(block if log_bytes is None else block[:block.rfind(b"\n", 0, log_bytes) + 1])
    (job_dir / "job.json").write_text(json.dumps({
        "state": "running", "started_epoch": time.time(), "attempt": 1,
        "plan": {"job_id": job_dir.name, "job_name": "long", "backend": "plain", "nnodes": 1,
                 "ranks": [{"name": str(r), "role": "worker"} for r in range(RANKS)]},
        "pids": {}, "launcher": {"pid": os.getpid(), "uid": os.getuid(),
                                 "host": os.uname().nodename}}))
    return str(job_dir)


def first_board(job_dir: str):
    follower = JobFollower(job_dir)
    follower.refresh()
    bundle(follower)


def whole_logs(job_dir: str):
    for rank in range(RANKS):
        with open(os.path.join(job_dir, f"rank_{rank}.log"), "rb") as fh:
            fh.read().count(b"\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    try:
        job_dir = make_long_job(work / "long")
        counted_dir = make_long_job(work / "counted", COUNT_LIMIT)
        size = sum(p.stat().st_size for p in Path(job_dir).glob("rank_*.log"))
        times = alternate({"first board (from the end)": lambda: first_board(job_dir),
                           "every log read whole": lambda: whole_logs(job_dir),
                           COUNTED: lambda: first_board(counted_dir)}, args.rounds)
        shares = bench_board(args.rounds, args.seconds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    board = [b - i for b, i in zip(shares["board"], shares["idle"])]
    rows = "\n".join(f"| {name} | {spread(values, 'ms', 1000, 1)} |"
                     for name, values in times.items())
    first = statistics.median(times["first board (from the end)"])
    ratio = statistics.median(times["every log read whole"]) / first
    cost = statistics.median(board) * 100
    first_verdict = "meets" if first < 0.5 else "MISSES"
    cost_verdict = "meets" if cost < 2 else "MISSES"
    body = f"""## jobs

Command: `.venv/bin/python bench/jobs.py --rounds {args.rounds} --seconds {args.seconds:g}`
({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load} on
{os.cpu_count()} cores).

Attach's first board of an {RANKS}-rank job whose logs hold {LINES:,} lines
({size / 1e6:.0f} MB), median (min–max) of {args.rounds} alternating rounds, page cache warm.

| | time |
|---|---:|
{rows}

Reading from the end is {ratio:.0f}× faster than reading the logs whole, and does not grow
with the logs (the board's tail is their last 64 KiB; a log over {COUNT_LIMIT >> 20} MiB says "last 12
lines of a N MiB log, too long to count"). The last row is the most a first board spends
counting lines: {RANKS} logs of {COUNT_LIMIT >> 20} MiB each, just within the bound, their lines counted.

Attach's first board of {RANKS} ranks and {LINES:,} log lines: {first * 1000:.1f} ms (goal < 0.5 s: {first_verdict}).

The board of a background job in the kernel: an {RANKS}-rank job printing a line per rank
every 0.2 s, followed by `LiveBoard` (every 0.5 s, bundles JSON-serialized as ipykernel sends
them) for {args.seconds:g} s, {args.rounds} rounds alternating with an idle wait. Share of one
core used by the following process: board {spread(shares['board'], '%', 100, 2)}, idle
{spread(shares['idle'], '%', 100, 2)} (median of the per-round differences below).

A background job's board in the kernel: {cost:.2f} % of a core (goal < 2 %: {cost_verdict}).
"""
    write_section("jobs", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
