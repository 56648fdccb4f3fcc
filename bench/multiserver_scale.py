"""One job across many servers on loopback: how fast a failure on the last server stops all.

    .venv/bin/python bench/multiserver_scale.py [--rounds 3] [--cases 32x1,8x8]

L launchers (`--nnodes L`, one log folder each) x R ranks, tracked into the team server
(`platform-run server`: MLflow with the bulk route on a fresh PostgreSQL cluster). Every rank
logs a point and marks itself up; once all are up, the last rank of the last server waits
1 s, notes the time and exits 3. Every other rank notes when its SIGTERM arrives. Measured
from the failing rank's exit: `stopped` = the last SIGTERM to arrive (every rank of every
server told to stop), `returned` = every launcher returned (its tracking drained and its end
recorded too). Checked: one job id, one parent run, FAILED, every rank a child. The cases
alternate their order round by round. Writes docs/benchmarks.md section `multiserver scale`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchdoc import load_text, write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
GOAL_S = 2.0  # a failure on the last server stops every server's ranks within this

RANK_SCRIPT = """
import os, signal, sys, time
from platform_plugin import tracking
work, rank, size = os.environ["BENCH_WORK"], int(os.environ["RANK_ID"]), int(os.environ["RANK_SIZE"])

def note(name):
    with open(os.path.join(work, name), "w") as fh:
        fh.write(repr(time.time()))

def stopped(signum, frame):
    note(f"term-{rank}")
    sys.exit(143)

signal.signal(signal.SIGTERM, stopped)
tracking.get_tracker().log_metric("loss", 1.0, step=0)
note(f"up-{rank}")
if rank == size - 1:
    deadline = time.time() + 600
    while sum(n.startswith("up-") for n in os.listdir(work)) < size and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    note("failed")
    sys.exit(3)
time.sleep(600)
"""


def stamp(path: Path) -> float:
    return float(path.read_text())


def run_case(launchers: int, ranks: int, uri: str, root: Path) -> dict:
    from platform_plugin.util.ports import free_port
    work = root / f"{launchers}x{ranks}-{uuid.uuid4().hex[:6]}"
    marks = work / "marks"
    marks.mkdir(parents=True)
    script = work / "rank.py"
    script.write_text(RANK_SCRIPT)
    experiment = work.name
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": experiment,
           "BENCH_WORK": str(marks), "PYTHONPATH": str(REPO),
           "PLATFORM_TRACKING_DRAIN_TIMEOUT": "120"}
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "platform_plugin", "launch", "--log-dir",
                               str(work / f"server{n}"), "--tracking", "mlflow", "--nproc",
                               str(ranks), "--nnodes", str(launchers), "--node-rank", str(n),
                               "--master-port", str(port), "--backend", "plain", "--show",
                               "none", "--no-system-metrics", "--", sys.executable, str(script)],
                              cwd=str(work), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
             for n in range(launchers)]
    codes = [p.wait(timeout=900) for p in procs]
    returned = time.time()
    failed = stamp(marks / "failed")
    terms = [stamp(p) for p in marks.glob("term-*")]
    job_ids = {d.name for n in range(launchers) for d in (work / f"server{n}").iterdir()}
    parents, children, status = job_runs(uri, experiment)
    if (parents, children, status) == (1, launchers * ranks, "FAILED"):
        shutil.rmtree(work, ignore_errors=True)
    else:  # kept, to see why (its helper.json / helper.log in every server's spool)
        print(f"kept {work}: {parents} parent(s), {children} children, {status}", flush=True)
    return {"stopped": max(terms) - failed if terms else None, "told": len(terms),
            "returned": returned - failed, "codes": sorted(set(codes)), "job_ids": len(job_ids),
            "parents": parents, "children": children, "status": status}


def job_runs(uri: str, experiment: str) -> tuple[int, int, str]:
    """(parent runs, rank runs under the first, its status) once the helpers ended them."""
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    deadline = time.monotonic() + 120
    while True:
        parents = client.search_runs([exp.experiment_id], "tags.`platform.role` = 'job'")
        if parents and all(p.info.status != "RUNNING" for p in parents) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if not parents:
        return 0, 0, "-"
    kids = client.search_runs([exp.experiment_id], "tags.`mlflow.parentRunId` = "
                              f"'{parents[0].info.run_id}'", max_results=1000)
    return len(parents), len(kids), parents[0].info.status


class TeamServer:
    """`platform-run server`'s MLflow (4 workers, bulk route) on a fresh PostgreSQL cluster."""

    def __enter__(self):
        from platform_plugin.tracking.server.local import start_team_server, wait_healthy
        from platform_plugin.tracking.server.postgres import LocalPostgres
        from platform_plugin.util.ports import free_port
        self.root = tempfile.mkdtemp(prefix="bench-scale-")
        os.chmod(self.root, 0o755)
        self.pg = LocalPostgres(os.path.join(self.root, "data"), free_port())
        self.pg.start()
        port, folder = free_port(), os.path.join(self.root, "server")
        os.makedirs(folder)
        self.proc = start_team_server(self.pg.uri, "127.0.0.1", port, workers=4, bulk=True,
                                      artifacts=os.path.join(self.root, "art"), folder=folder)
        self.uri = f"http://127.0.0.1:{port}"
        wait_healthy(self.uri, self.proc, log_path=os.path.join(folder, "mlflow-server.log"),
                     timeout=300)
        return self

    def __exit__(self, *exc):
        from platform_plugin.tracking.server.local import stop_server
        stop_server(self.proc)
        self.pg.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="32x1,8x8")
    args = parser.parse_args()
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    load_start = load_text()
    results: dict[tuple, list[dict]] = {}
    with TeamServer() as server:
        root = Path(tempfile.mkdtemp(prefix="bench-scale-work-"))
        for round_no in range(args.rounds):
            for launchers, ranks in (cases if round_no % 2 == 0 else cases[::-1]):
                result = run_case(launchers, ranks, server.uri, root)
                results.setdefault((launchers, ranks), []).append(result)
                print(f"{launchers}x{ranks}", result, f"load {os.getloadavg()[0]:.1f}", flush=True)
        if not any(root.iterdir()):  # else it holds a kept case
            root.rmdir()
    write(results, args, load_start, load_text())


def spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:.2f} ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else f"{med:.2f}"


NOTES = [
    "- Earlier runs on this machine, same command: 2026-12-03 20:30 UTC at load 22-37, 32 x 1 "
    "stopped 1.26 s median (1.22-2.06), 8 x 8 0.72 s (0.66-0.86): the slowest, 2.06 s at load "
    "36.6, missed the 2 s goal; the stop is a message relayed by node 0 to every launcher, "
    "each then signals its ranks, so on 2 cores shared by ~30 runnable processes the last "
    "launcher to be scheduled sets the figure.",
    "- That run and an 8 x 8-only one also showed the parent run split in 2 of 6 cases: one or "
    "two servers' rank runs (8 or 16 of 64) under another parent than the others' (each server's "
    "helper then found or created "
    "the parent itself and the oldest start time won). Since then node 0's helper is the one "
    "creator and the others wait for it (docs/tracking.md); every run since: 1 parent, every "
    "rank a child.",
]


def write(results, args, load_start: str, load_end: str) -> None:
    lines = ["## multiserver scale", "",
             f"Command: `.venv/bin/python bench/multiserver_scale.py --rounds {args.rounds} "
             f"--cases {args.cases}` ({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
             f"{load_start} at the start, {load_end} at the end: 2 cores shared with other "
             "jobs). L launchers (`--nnodes L` on loopback) x R ranks tracked into "
             "`platform-run server` on PostgreSQL; the last server's last rank fails once every "
             "rank runs. Stopped = from its exit to the last other rank's SIGTERM (every server's "
             "ranks told to stop, over the job link); returned = to every launcher returned "
             "(tracking drained, runs ended). Median over rounds (min-max), the cases "
             "alternating their order.", "",
             "| launchers x ranks | stopped s | ranks told | returned s | exit codes | job ids | "
             "parent runs | children | parent status |", "|---|---:|---:|---:|---|---:|---:|---:|---|"]
    worst = []
    for (launchers, ranks), runs in results.items():
        stops = [r["stopped"] for r in runs if r["stopped"] is not None]
        worst += stops
        last = runs[-1]
        lines.append(f"| {launchers} x {ranks} | {spread(stops) if stops else '-'} | "
                     f"{min(r['told'] for r in runs)} of {launchers * ranks - 1} | "
                     f"{spread([r['returned'] for r in runs])} | {last['codes']} | "
                     f"{last['job_ids']} | {last['parents']} | {last['children']} | "
                     f"{last['status']} |")
    verdict = (f"- Goal: a failure on the last server stops every server within {GOAL_S:g} s: "
               f"slowest of every round {max(worst):.2f} s — "
               f"**{'meets' if max(worst) <= GOAL_S else 'misses'}**." if worst else
               "- Nothing measured.")
    lines += ["", verdict, *NOTES]
    print(verdict)
    write_section("multiserver scale", "\n".join(lines))


if __name__ == "__main__":
    main()
