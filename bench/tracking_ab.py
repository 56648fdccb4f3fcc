"""Delivery into MLflow, this checkout beside another one (the code before a change), alternating:
bench/tracking.py's own measures run by each checkout's interpreter with its own package first
on the path. Prints the runs and the medians; docs/benchmarks.md (tracking) quotes them.

    .venv/bin/python bench/tracking_ab.py OLD_CHECKOUT [--rounds 4] [--ranks 4] [--steps 50000] [--server]
    .venv/bin/python bench/tracking_ab.py OLD_CHECKOUT --sink-only [--rounds 3]

Default: `deliver_ours` (real ranks into a fresh sqlite store, to every point stored);
`--server`: `deliver_server` (a plain `mlflow server`: the log_batch route); `--sink-only`: the
MLflow sink's `deliver_round` alone, 4 streams x 20 rounds x 2,500 points into sqlite (CPU and
wall, no ranks: what the sink's own code costs).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

HERE = str(Path(__file__).resolve().parents[1])
DELIVERY = """
import sys, json, tempfile; from pathlib import Path
sys.path.insert(0, 'bench'); import tracking as t
with tempfile.TemporaryDirectory() as tmp:
    if {server!r}:
        got = t.deliver_server(Path(tmp), {ranks}, {steps})
    else:
        got = t.deliver_ours(Path(tmp) / 'ours', {ranks}, {steps}, None)
        got['present'], got['duplicates'] = t.stored_points(Path(tmp) / 'ours' / 'mlflow.db')
    got['rate'] = {ranks} * {steps} / got['stored']
print('RESULT ' + json.dumps(got))
"""
SINK_ONLY = r"""
import json, tempfile, time
from pathlib import Path
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
from platform_plugin.tracking.shared.state import SinkConfig, StreamState
with tempfile.TemporaryDirectory() as tmp:
    spool = Path(tmp) / "tracking"; spool.mkdir()
    ranks = {str(l): {"rank_id": l} for l in range(4)}
    config = SinkConfig("mlflow", tracking_uri=f"sqlite:///{tmp}/mlflow.db", experiment_name="ab",
                        ranks=ranks, job={"job_id": "j", "job_name": "j", "parent": True, "tags": {}})
    sink = MlflowSink()
    sink.ensure_runs(config, spool, list(ranks))
    states = {l: StreamState.load(spool, "rank_" + l) for l in ranks}
    t0, c0 = time.perf_counter(), time.process_time()
    for r in range(20):
        sink.deliver_round(config, [(l, states[l], [["m", "loss", 0.5, r * 2500 + s, 1000 + s]
                                                    for s in range(2500)]) for l in ranks])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print("RESULT " + json.dumps({"rate": 200000 / wall, "cpu_rate": 200000 / cpu}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--server", action="store_true")
    parser.add_argument("--sink-only", action="store_true")
    args = parser.parse_args()
    code = SINK_ONLY if args.sink_only else DELIVERY.format(server=args.server, ranks=args.ranks, steps=args.steps)
    sides = {"new": HERE, "old": str(Path(args.old).resolve())}
    runs: dict[str, list[dict]] = {"new": [], "old": []}
    print("load", os.getloadavg())
    for round_no in range(args.rounds):
        for side in ("new", "old") if round_no % 2 == 0 else ("old", "new"):
            root = sides[side]
            done = subprocess.run([f"{root}/.venv/bin/python", "-c", code], cwd=root,
                                  env=dict(os.environ, PYTHONPATH=root), capture_output=True, text=True)
            found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if not found:
                print(side, "failed:", done.stderr[-1500:])
                continue
            runs[side].append(json.loads(found[0][len("RESULT "):]))
            print(round_no, side, runs[side][-1], flush=True)
    print("load", os.getloadavg())
    for key in ("rate", "cpu_rate") if args.sink_only else ("rate",):
        for side, got in runs.items():
            values = [g[key] for g in got]
            print(f"{side} {key}: median {statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f}) points/s")
        pairs = [n[key] / o[key] for n, o in zip(runs["new"], runs["old"])]
        print(f"new/old {key}, paired: median {statistics.median(pairs):.2f} ({min(pairs):.2f}–{max(pairs):.2f})")


if __name__ == "__main__":
    main()
