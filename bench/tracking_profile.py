"""Where the forwarding helper's time goes: the helper (MLflow import, store, runs, delivery,
per-step aggregates) run in-process under cProfile over spools written beforehand, RANKS x
STEPS points, into a fresh sqlite store. Used by bench/tracking.py when the goal is missed.

    .venv/bin/python bench/tracking_profile.py [--ranks 4] [--steps 100000] [--workers N]
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def write_spools(work: Path, ranks: int, steps: int) -> Path:
    """A job's spool folder as the launcher prepares it, with every rank's points already in."""
    from platform_plugin.tracking.job.handle import JobTracking
    from platform_plugin.tracking.rank.spool import encode_metric
    from platform_plugin.tracking.shared.state import JobEnd
    from tests.tracking.helpers import make_plan
    os.chdir(work)
    plan = make_plan(work, ranks)
    spool = Path(JobTracking.create("mlflow", plan).prepare()["PLATFORM_TRACKING_SPOOL_DIR"])
    key, t0 = json.dumps("loss"), int(time.time() * 1000)
    for rank in range(ranks):
        with open(spool / f"rank_{rank}.jsonl", "w") as f:
            f.write("".join(encode_metric(key, 1.0 / (s + 1), s, t0 + s) for s in range(steps)))
    JobEnd("FINISHED", time.time() + 3600).save(spool)
    return spool


def profile_helper(ranks: int, steps: int, top: int = 8) -> dict:
    """Seconds, points/s and the `top` functions by own time (cProfile sees the helper's main
    thread: with joint rounds that is where delivery runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        spool = write_spools(Path(tmp), ranks, steps)
        from platform_plugin.tracking.delivery import helper as delivery
        profile = cProfile.Profile()
        t0 = time.perf_counter()
        profile.enable()
        delivery.Helper(spool).run()
        profile.disable()
        seconds = time.perf_counter() - t0
    stats = pstats.Stats(profile).sort_stats("tottime")
    rows = []
    for (path, line, name), (_, calls, own, cumulative, _) in sorted(
            stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]:  # type: ignore[attr-defined]
        where = f"{Path(path).name}:{line} {name}" if line else name
        rows.append((where, calls, own, cumulative))
    return {"seconds": seconds, "rate": ranks * steps / seconds, "top": rows,
            "total": sum(v[2] for v in stats.stats.values())}  # type: ignore[attr-defined]


def profile_lines(got: dict, ranks: int, steps: int) -> list[str]:
    lines = [f"cProfile of the forwarding helper alone (in-process, spools of {ranks} × {steps:,} points "
             f"written beforehand, fresh store; profiling slows it): {got['seconds']:.1f} s, "
             f"{got['rate']:,.0f} points/s. Own time of the top functions:", "",
             "| function | calls | own time | share |", "|---|---:|---:|---:|"]
    for where, calls, own, _ in got["top"]:
        lines.append(f"| `{where}` | {calls:,} | {own:.2f} s | {100 * own / got['total']:.0f} % |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    print("\n".join(profile_lines(profile_helper(args.ranks, args.steps), args.ranks, args.steps)))


if __name__ == "__main__":
    main()
