"""Tracking benchmark: the in-rank cost of a metric and end-to-end delivery into MLflow,
each side by side with MLflow's own way of doing it.

    .venv/bin/python bench/tracking.py [--steps 10000] [--ranks 8]

1. In-rank cost per `log_metric`, median of single calls: platform_plugin's tracker (append to
   the spool buffer) vs MLflow's synchronous `mlflow.log_metric` and its async variant.
2. Delivery of RANKS x STEPS metric points, launched as real rank processes by
   `platform_plugin.launch`, into a fresh sqlite MLflow store, end to end (launch to return,
   all points verified in MLflow) vs the same ranks logging with MLflow's async logging
   (MLFLOW_ENABLE_ASYNC_LOGGING=true, MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS=1) into runs
   created beforehand.
Writes the results into docs/benchmarks.md (section `tracking`).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RANK_SCRIPT = """
import os
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(int(os.environ["BENCH_STEPS"])):
    t.log_metric("loss", 1.0 / (step + 1), step=step)
"""

ASYNC_RANK_SCRIPT = """
import os, mlflow
from mlflow.tracking import MlflowClient
mlflow.set_tracking_uri(os.environ["BENCH_URI"])
run_id = os.environ["BENCH_RUN_%s" % os.environ["RANK_ID"]]
with mlflow.start_run(run_id=run_id):
    for step in range(int(os.environ["BENCH_STEPS"])):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step, synchronous=False)
"""


def median_call_us(call, n: int) -> float:
    samples = []
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        call(i)
        samples.append(clock() - t0)
    return statistics.median(samples) / 1000


def in_rank_cost(work: Path) -> dict:
    from platform_plugin.tracking.identity import RankIdentity
    from platform_plugin.tracking.tracker import Tracker
    tracker = Tracker(work / "spool", RankIdentity("0", "0", "bench", "bench", "s", "h"))
    ours = median_call_us(lambda i: tracker.log_metric("loss", 1.0 / (i + 1), step=i), 100_000)
    tracker.close()

    import mlflow
    mlflow.set_tracking_uri(f"sqlite:///{work / 'sync.db'}")
    mlflow.set_experiment("bench-sync")
    with mlflow.start_run():
        sync = median_call_us(lambda i: mlflow.log_metric("loss", 1.0 / (i + 1), step=i), 300)
        asynchronous = median_call_us(
            lambda i: mlflow.log_metric("loss", 1.0 / (i + 1), step=i, synchronous=False), 3000)
    return {"ours_us": ours, "mlflow_sync_us": sync, "mlflow_async_us": asynchronous}


def count_points(uri: str, run_ids: list[str]) -> int:
    from mlflow.tracking import MlflowClient
    client = MlflowClient(uri)
    return sum(len(client.get_metric_history(r, "loss")) for r in run_ids)


def deliver_ours(work: Path, ranks: int, steps: int) -> dict:
    from platform_plugin.launcher import launch
    from platform_plugin.tracking.state import StreamState
    job = work / "ours"
    job.mkdir()
    (job / "rank.py").write_text(RANK_SCRIPT)
    os.environ.update(BENCH_STEPS=str(steps), PLATFORM_LOG_DIR=str(job / "logs"))
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.perf_counter()
    result = launch([sys.executable, "rank.py"], nproc=ranks, backend="plain", cwd=str(job),
                    tracking="mlflow", write=lambda text: None)
    seconds = time.perf_counter() - t0
    spool = Path(result.tracking.spool_dir)
    run_ids = [StreamState.load(spool, f"rank_{r}").run_id for r in range(ranks)]
    present = count_points(f"sqlite:///{job / 'mlflow.db'}", run_ids)
    return {"seconds": seconds, "present": present, "pending": result.tracking.pending}


def deliver_mlflow_async(work: Path, ranks: int, steps: int) -> dict:
    from mlflow.tracking import MlflowClient
    job = work / "async"
    job.mkdir()
    (job / "rank.py").write_text(ASYNC_RANK_SCRIPT)
    uri = f"sqlite:///{job / 'mlflow.db'}"
    client = MlflowClient(uri)  # store and runs made first: 8 fresh opens corrupt the schema
    experiment = client.create_experiment("bench-async")
    run_ids = [client.create_run(experiment, run_name=f"rank-{r:02d}").info.run_id for r in range(ranks)]
    env = dict(os.environ, BENCH_URI=uri, BENCH_STEPS=str(steps), MLFLOW_ENABLE_ASYNC_LOGGING="true",
               MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS="1",
               **{f"BENCH_RUN_{r}": run_ids[r] for r in range(ranks)})
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "rank.py"], cwd=job, env={**env, "RANK_ID": str(r)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r in range(ranks)]
    errors = [p.communicate()[1] for p in procs]
    seconds = time.perf_counter() - t0
    failed = [e.strip().splitlines()[-1] for p, e in zip(procs, errors) if p.returncode != 0 and e.strip()]
    return {"seconds": seconds, "present": count_points(uri, run_ids), "failed_ranks": len(failed),
            "first_error": failed[0][:160] if failed else ""}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    total = args.ranks * args.steps
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cost = in_rank_cost(work)
        ours = deliver_ours(work, args.ranks, args.steps)
        theirs = deliver_mlflow_async(work, args.ranks, args.steps)
    ours_rate, theirs_rate = total / ours["seconds"], total / theirs["seconds"]
    lines = [
        "## tracking",
        "",
        f"Command: `.venv/bin/python bench/tracking.py --ranks {args.ranks} --steps {args.steps}` "
        f"({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, 2 cores shared with other jobs).",
        "",
        "In-rank cost of one `log_metric` call (median of single calls):",
        "",
        "| | median per call | vs platform_plugin |",
        "|---|---:|---:|",
        f"| platform_plugin tracker (spool buffer) | {cost['ours_us']:.2f} µs | 1× |",
        f"| MLflow `log_metric`, synchronous, sqlite | {cost['mlflow_sync_us']:.0f} µs | "
        f"{cost['mlflow_sync_us'] / cost['ours_us']:.0f}× slower |",
        f"| MLflow `log_metric(synchronous=False)` | {cost['mlflow_async_us']:.1f} µs | "
        f"{cost['mlflow_async_us'] / cost['ours_us']:.0f}× slower |",
        "",
        f"Delivery of {args.ranks} ranks × {args.steps:,} steps = {total:,} points into a fresh sqlite store, "
        "rank processes started to every point stored:",
        "",
        "| | seconds | points/s | points present |",
        "|---|---:|---:|---:|",
        f"| platform_plugin (`launch`, spool + supervisor forwarder, `log_batch`) | {ours['seconds']:.1f} | "
        f"{ours_rate:,.0f} | {ours['present']:,} / {total:,} |",
        f"| MLflow async logging (buffering 1 s), one run per rank made first | {theirs['seconds']:.1f} | "
        f"{theirs_rate:,.0f} | {theirs['present']:,} / {total:,} |",
        "",
        f"Ratio: platform_plugin delivers {ours_rate / theirs_rate:.1f}× MLflow async's rate "
        f"(goal ≥ 5,000 points/s: {'met' if ours_rate >= 5000 and ours['present'] == total else 'NOT met'})."
        + (f" MLflow async: {theirs['failed_ranks']} rank(s) failed, first error: `{theirs['first_error']}`."
           if theirs["failed_ranks"] else ""),
    ]
    text = "\n".join(lines)
    print(text)
    write_section("tracking", text)


if __name__ == "__main__":
    main()
