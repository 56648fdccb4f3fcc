"""Tracking benchmark: what default tracking costs a launch, the in-rank cost of a metric, and
end-to-end delivery into MLflow, each side by side with its anchor.

    .venv/bin/python bench/tracking.py [--rounds 3] [--ranks 4] [--steps 100000]
                                       [--delivery-rounds 2] [--server-steps 10000]
                                       [--async-steps 5000] [--no-profile] [--no-write]
                                       [--only launch]

`--only launch` runs parts 1 and 2 (a minute or two) and keeps the section's other parts as the
last full run wrote them (with that run's command line).

1. Launch cost, 8 no-op ranks, `platform-run launch` with default tracking (MLflow, sqlite) vs
   `--tracking none`, alternating rounds: wall time, peak RSS of the launcher process itself
   (RUSAGE_SELF, the forwarding helper is a process of its own), and time from the command to
   the first rank's first line. Between rounds the previous job's helper is let finish.
2. Two `launch()` calls in one process (a notebook kernel's `%dist_run` twice): both walls and
   whether MLflow was ever imported into that process.
3. In-rank cost per `log_metric` (median of single calls): the tracker vs MLflow's synchronous
   and asynchronous `log_metric`.
4. Delivery of RANKS x STEPS points launched as real ranks into a fresh sqlite store (the
   default store of the job's folder), DELIVERY_ROUNDS times: time to `launch()` returning and
   time to all points stored (drain deadline raised for the measure), points/s; the same into
   an `mlflow server` (SERVER_STEPS per rank); and MLflow's own async logging into runs made
   first (ASYNC_STEPS per rank). When the sqlite goal (>= 10,000 points/s) is missed, the
   forwarding helper alone is profiled (bench/tracking_profile.py) and the doc lists its top
   functions.
Writes docs/benchmarks.md, section `tracking`.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import load_text, read_section, spread, write_section  # bench/benchdoc.py
from tracking_profile import profile_helper, profile_lines  # bench/tracking_profile.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PY = sys.executable

RANK_SCRIPT = """
import os
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(int(os.environ["BENCH_STEPS"])):
    t.log_metric("loss", 1.0 / (step + 1), step=step)
"""
ASYNC_RANK_SCRIPT = """
import os, mlflow
mlflow.set_tracking_uri(os.environ["BENCH_URI"])
run_id = os.environ["BENCH_RUN_%s" % os.environ["RANK_ID"]]
with mlflow.start_run(run_id=run_id):
    for step in range(int(os.environ["BENCH_STEPS"])):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step, synchronous=False)
"""
# the launcher's CLI, reporting its own peak RSS (not its children's) on exit
CLI = ("import resource, sys\nfrom platform_plugin.cli import main\nrc = main(sys.argv[1:])\n"
       "u = resource.getrusage(resource.RUSAGE_SELF)\n"
       "sys.stderr.write('MAXRSS_KB %d CPU_S %f\\n' % (u.ru_maxrss, u.ru_utime + u.ru_stime))\n"
       "sys.exit(rc)\n")
FIRST_LINE = "import time; print(repr(time.time()), flush=True)"
KERNEL = """
import sys, time
from platform_plugin.launcher import launch
walls = []
for _ in range(2):
    t0 = time.perf_counter()
    launch([sys.executable, "-c", "pass"], nproc=8, backend="plain", write=lambda s: None)
    walls.append(time.perf_counter() - t0)
print(walls[0], walls[1], "mlflow" in sys.modules)
"""


def wait_helpers_done(log_dir: Path, timeout: float = 300) -> None:
    """Let every forwarding helper of earlier jobs finish, so rounds don't share the CPU."""
    from platform_plugin.tracking.job.handle import DeliveryReport
    for spool in log_dir.glob("*/tracking"):
        DeliveryReport(spool_dir=str(spool)).wait_ended(timeout)


def one_launch(work: Path, tracking: str) -> dict:
    log_dir = work / "logs"
    t0 = time.time()
    done = subprocess.run([PY, "-c", CLI, "launch", "--nproc", "8", "--backend", "plain", "--show", "none",
                           "--tracking", tracking, "--log-dir", str(log_dir), "--", PY, "-c", FIRST_LINE],
                          cwd=work, capture_output=True, text=True)
    wall = time.time() - t0
    assert done.returncode == 0, done.stdout + done.stderr
    rss = int(done.stderr.split("MAXRSS_KB ")[1].split()[0]) / 1024
    cpu = float(done.stderr.split("CPU_S ")[1].split()[0])
    job = max((d for d in log_dir.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    firsts = [float(p.read_text().split()[0]) for p in job.glob("rank_*.log")]
    if tracking != "none":
        wait_helpers_done(log_dir)
    return {"wall": wall, "rss": rss, "first": min(firsts) - t0, "cpu": cpu}


def launch_cost(work: Path, rounds: int) -> dict[str, dict[str, list[float]]]:
    sides = {"mlflow": work / "default", "none": work / "none"}
    out = {name: {"wall": [], "rss": [], "first": [], "cpu": []} for name in sides}
    for name, folder in sides.items():
        folder.mkdir()
        one_launch(folder, "auto" if name == "mlflow" else "none")  # warm-up: store, page cache
    for round_no in range(rounds):
        for name in (list(sides) if round_no % 2 == 0 else list(sides)[::-1]):
            got = one_launch(sides[name], "auto" if name == "mlflow" else "none")
            for key, value in got.items():
                out[name][key].append(value)
    return out


def kernel_twice(work: Path) -> tuple[float, float, bool]:
    folder = work / "kernel"
    folder.mkdir()
    env = dict(os.environ, PLATFORM_LOG_DIR=str(folder / "logs"))
    out = subprocess.run([PY, "-c", KERNEL], cwd=folder, env=env, capture_output=True, text=True, check=True)
    first, second, imported = out.stdout.split()
    wait_helpers_done(folder / "logs")
    return float(first), float(second), imported == "True"


def median_call_us(call, n: int) -> float:
    samples = []
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        call(i)
        samples.append(clock() - t0)
    return statistics.median(samples) / 1000


def in_rank_cost(work: Path) -> dict:
    from platform_plugin.tracking.rank.identity import RankIdentity
    from platform_plugin.tracking.rank.tracker import Tracker
    tracker = Tracker(work / "spool", RankIdentity("0", "0", "bench", "bench", "s", "h"))
    ours = median_call_us(lambda i: tracker.log_metric("loss", 1.0 / (i + 1), step=i), 200_000)
    tracker.close()
    import mlflow
    mlflow.set_tracking_uri(f"sqlite:///{work / 'sync.db'}")
    mlflow.set_experiment("bench-sync")
    with mlflow.start_run():
        sync = median_call_us(lambda i: mlflow.log_metric("loss", 1.0 / (i + 1), step=i), 300)
        asynchronous = median_call_us(
            lambda i: mlflow.log_metric("loss", 1.0 / (i + 1), step=i, synchronous=False), 3000)
    return {"ours_us": ours, "mlflow_sync_us": sync, "mlflow_async_us": asynchronous}


def deliver_ours(job: Path, ranks: int, steps: int, uri: str | None) -> dict:
    from platform_plugin.launcher import launch
    job.mkdir()
    (job / "rank.py").write_text(RANK_SCRIPT)
    os.environ.update(BENCH_STEPS=str(steps), PLATFORM_LOG_DIR=str(job / "logs"),
                      PLATFORM_TRACKING_DRAIN_TIMEOUT="1800")  # measure to the end
    if uri:
        os.environ["MLFLOW_TRACKING_URI"] = uri
    else:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.perf_counter()
    result = launch([PY, "rank.py"], nproc=ranks, backend="plain", cwd=str(job), tracking="mlflow",
                    write=lambda text: None)
    returned = time.perf_counter() - t0
    result.tracking.wait_ended(1800)
    stored_s = time.perf_counter() - t0
    return {"returned": returned, "stored": stored_s, "pending": result.tracking.pending,
            "parent": result.tracking.parent_run_id}


def stored_points(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT count(*), count(DISTINCT run_uuid || key || step || timestamp) "
                           "FROM metrics WHERE key = 'loss'").fetchone()
    return rows[0], rows[0] - rows[1]


def deliver_server(work: Path, ranks: int, steps: int) -> dict:
    from platform_plugin.tracking.server.local import start_server, stop_server, wait_healthy
    from platform_plugin.util.ports import free_port
    folder = work / "server"
    folder.mkdir()
    port = free_port()
    proc = start_server(f"sqlite:///{folder / 'mlflow.db'}", port, log_path=folder / "server.log")
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=300, log_path=folder / "server.log")
        got = deliver_ours(work / "server-job", ranks, steps, f"http://127.0.0.1:{port}")
    finally:
        stop_server(proc)
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    got["present"], got["duplicates"] = stored_points(folder / "mlflow.db")
    return got


def deliver_mlflow_async(work: Path, ranks: int, steps: int) -> dict:
    from mlflow.tracking import MlflowClient
    job = work / "async"
    job.mkdir()
    (job / "rank.py").write_text(ASYNC_RANK_SCRIPT)
    uri = f"sqlite:///{job / 'mlflow.db'}"
    client = MlflowClient(uri)  # store and runs made first: fresh concurrent opens corrupt it
    experiment = client.create_experiment("bench-async")
    run_ids = [client.create_run(experiment, run_name=f"rank-{r:02d}").info.run_id for r in range(ranks)]
    env = dict(os.environ, BENCH_URI=uri, BENCH_STEPS=str(steps), MLFLOW_ENABLE_ASYNC_LOGGING="true",
               MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS="1",
               **{f"BENCH_RUN_{r}": run_ids[r] for r in range(ranks)})
    t0 = time.perf_counter()
    procs = [subprocess.Popen([PY, "rank.py"], cwd=job, env={**env, "RANK_ID": str(r)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r in range(ranks)]
    errors = [p.communicate()[1] for p in procs]
    seconds = time.perf_counter() - t0
    failed = [e.strip().splitlines()[-1] for p, e in zip(procs, errors) if p.returncode != 0 and e.strip()]
    present, duplicates = stored_points(job / "mlflow.db")
    return {"stored": seconds, "present": present, "duplicates": duplicates, "failed_ranks": len(failed)}


def verdict(ok: bool) -> str:
    return "meets" if ok else "misses"


# What is left of default tracking's cost on a no-op job: said in the doc when the goal is missed
WALL_COST = ("- What the launcher still pays for default tracking on a no-op job: importing the "
             "launcher side of tracking (tracking/job/: handle, report, conventions, sink_choice, "
             "sysmetrics; tracking/delivery/: state, offsets), `sink.json` and "
             "`end.json`, the job's tags (`job_sink_config`), the forwarding helper's spawn "
             "(by a thread, 0.5 s after the ranks started or at their end: for a no-op job at its "
             "end) and its interpreter's start on the same 2 cores (it imports the forwarder and "
             "the sink only once a rank spooled something or the job ended). The system-metrics sampler imports and samples nothing for a job "
             "shorter than its interval; MLflow is never imported by the launcher.")


def launch_lines(cost: dict, kernel: tuple[float, float, bool], rounds: int) -> list[str]:
    m, n = cost["mlflow"], cost["none"]
    r_wall = statistics.median(m["wall"]) / statistics.median(n["wall"])
    r_rss = statistics.median(m["rss"]) / statistics.median(n["rss"])
    d_first = statistics.median(m["first"]) - statistics.median(n["first"])
    d_cpu = statistics.median(m["cpu"]) - statistics.median(n["cpu"])
    return [
        f"Launch cost of default tracking, 8 no-op ranks (`platform-run launch --nproc 8`), {rounds} "
        "alternating rounds after a warm-up each; median (min–max):", "",
        "| | wall | launcher peak RSS | command → first rank's first line | launcher CPU (user+sys) |",
        "|---|---|---|---|---|",
        f"| default tracking (MLflow, sqlite) | {spread(m['wall'])} | {spread(m['rss'], 'MiB', digits=1)} | "
        f"{spread(m['first'])} | {spread(m['cpu'], 'ms', 1000, 0)} |",
        f"| `--tracking none` | {spread(n['wall'])} | {spread(n['rss'], 'MiB', digits=1)} | {spread(n['first'])} | "
        f"{spread(n['cpu'], 'ms', 1000, 0)} |",
        "",
        f"- wall ratio {r_wall:.2f}× (goal ≤ 1.3×: {verdict(r_wall <= 1.3)}); launcher peak RSS ratio "
        f"{r_rss:.2f}× (goal ≤ 2×: {verdict(r_rss <= 2.0)}); first line {d_first * 1000:+.0f} ms vs "
        f"`--tracking none` (goal within 200 ms: {verdict(d_first <= 0.2)}).",
        f"- launcher CPU added by default tracking: {d_cpu * 1000:+.0f} ms (median; steadier than the "
        "wall on a shared machine: it does not count the time the launcher waits for a core).",
        f"- Two `launch()` calls in one process (a kernel's `%dist_run` twice, 8 no-op ranks): "
        f"{kernel[0]:.2f} s then {kernel[1]:.2f} s; MLflow imported into that process: "
        f"{'yes' if kernel[2] else 'no'} (goal: no MLflow import in the kernel: {verdict(not kernel[2])}).",
        WALL_COST,
        "- MLflow's import (~2.5 s, ~200 MiB), the store's first open, the experiment and the runs "
        "happen in the forwarding helper process after the ranks started; the launcher returns once "
        "every point is delivered, the helper ends the runs afterwards.", ""]


def delivery_lines(args, ours: list[dict], server: dict, theirs: dict) -> list[str]:
    total, s_total, a_total = args.ranks * args.steps, args.ranks * args.server_steps, args.ranks * args.async_steps
    rates = [total / o["stored"] for o in ours]
    rate, s_rate, a_rate = statistics.median(rates), s_total / server["stored"], a_total / theirs["stored"]
    complete = all(o["present"] == total and o["duplicates"] == 0 and o["pending"] == 0 for o in ours)
    stored = "; ".join(f"{o['present']:,} / {o['duplicates']}" for o in ours)
    return [
        f"Delivery, {args.ranks} ranks launched as real processes, one metric per step "
        "(drain deadline raised so the forwarder runs to the end; time from `launch()` called, "
        "the forwarding helper's MLflow import and the per-step aggregates included):", "",
        "| | points | `launch()` returned | all stored | points/s (to all stored) | stored / duplicates |",
        "|---|---:|---:|---:|---:|---|",
        f"| platform_plugin → sqlite, fresh default store (SQL fast path), {len(ours)} round(s) | "
        f"{total:,} | {spread([o['returned'] for o in ours], digits=1)} | "
        f"{spread([o['stored'] for o in ours], digits=1)} | {statistics.median(rates):,.0f} "
        f"({min(rates):,.0f}–{max(rates):,.0f}) | {stored} |",
        f"| platform_plugin → `mlflow server` (sqlite behind it) | "
        f"{s_total:,} | {server['returned']:.1f} s | {server['stored']:.1f} s | {s_rate:,.0f} | "
        f"{server['present']:,} / {server['duplicates']} |",
        f"| MLflow async logging (buffering 1 s) → sqlite, runs made first | {a_total:,} | – | "
        f"{theirs['stored']:.1f} s | {a_rate:,.0f} | {theirs['present']:,} / {theirs['duplicates']}"
        + (f" ({theirs['failed_ranks']} rank(s) failed)" if theirs["failed_ranks"] else "") + " |", "",
        f"- into sqlite: median {rate:,.0f} points/s end to end, every point stored once: "
        f"{'yes' if complete else 'NO'} (goal ≥ 10,000 points/s, all stored once: "
        f"{verdict(rate >= 10_000 and complete)}); {rate / a_rate:.1f}× MLflow async's rate. The per-step "
        "aggregates add 3 rows per step to the parent run (700,000 rows for 400,000 points).",
        "- Fresh stores are copies of MLflow's own empty schema kept once per MLflow version "
        "(tracking/sinks/sqlite_seed.py); the first store a machine makes with an MLflow version "
        "still runs MLflow's migrations (5–10 s here).", ""]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--delivery-rounds", type=int, default=2)
    parser.add_argument("--server-steps", type=int, default=10_000)
    parser.add_argument("--async-steps", type=int, default=5_000)
    parser.add_argument("--no-profile", action="store_true", help="no profile even if the goal is missed")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--only", choices=("launch",),
                        help="only the launch cost (parts 1-2); the section keeps the other parts")
    args = parser.parse_args()
    if args.only == "launch":
        return launch_only(args)
    load_before = load_text()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cost = launch_cost(work, args.rounds)
        kernel = kernel_twice(work)
        rank_cost = in_rank_cost(work)
        ours = []
        for round_no in range(args.delivery_rounds):
            got = deliver_ours(work / f"ours{round_no}", args.ranks, args.steps, None)
            got["present"], got["duplicates"] = stored_points(work / f"ours{round_no}" / "mlflow.db")
            ours.append(got)
        server = deliver_server(work, args.ranks, args.server_steps)
        theirs = deliver_mlflow_async(work, args.ranks, args.async_steps)
    rate = statistics.median(args.ranks * args.steps / o["stored"] for o in ours)
    profile = [] if rate >= 10_000 or args.no_profile else profile_lines(
        profile_helper(args.ranks, args.steps), args.ranks, args.steps)
    lines = [
        "## tracking", "",
        f"Command: `.venv/bin/python bench/tracking.py --rounds {args.rounds} --ranks {args.ranks} "
        f"--steps {args.steps} --delivery-rounds {args.delivery_rounds} --server-steps {args.server_steps} "
        f"--async-steps {args.async_steps}` — "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load_before} at the start, {load_text()} "
        "at the end (2 cores shared with other jobs: absolute times are noisy, the ratios of "
        "alternating runs are what count).", "",
        *launch_lines(cost, kernel, args.rounds),
        "In-rank cost of one `log_metric` call (median of single calls):", "",
        "| | median per call |", "|---|---:|",
        f"| platform_plugin tracker (spool buffer) | {rank_cost['ours_us']:.2f} µs |",
        f"| MLflow `log_metric`, synchronous, sqlite | {rank_cost['mlflow_sync_us']:.0f} µs |",
        f"| MLflow `log_metric(synchronous=False)` | {rank_cost['mlflow_async_us']:.1f} µs |", "",
        f"- in-rank `log_metric`: goal < 5 µs: {verdict(rank_cost['ours_us'] < 5)}.", "",
        *delivery_lines(args, ours, server, theirs),
        *profile,
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("tracking", text)


IN_RANK = "In-rank cost of one `log_metric` call"
EARLIER = "The in-rank cost and the delivery below are from an earlier full run: "


def launch_only(args) -> None:
    """Parts 1-2 only; the in-rank and delivery parts of the section are kept as they were."""
    load_before = load_text()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cost = launch_cost(work, args.rounds)
        kernel = kernel_twice(work)
    old = read_section("tracking")
    kept = old[old.index(IN_RANK):] if IN_RANK in old else ""
    # the full run's command line: kept as it was by an earlier --only launch, else its own
    lines_before = old.splitlines()
    earlier = next((line[len(EARLIER):] for line in lines_before if line.startswith(EARLIER)),
                   next((line for line in lines_before if line.startswith("Command:")), ""))
    lines = [
        "## tracking", "",
        f"Command: `.venv/bin/python bench/tracking.py --only launch --rounds {args.rounds}` — "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load_before} at the start, "
        f"{load_text()} at the end (2 cores shared with other jobs: absolute times are noisy, the "
        "ratios of alternating runs are what count).", "",
        *launch_lines(cost, kernel, args.rounds),
        *([EARLIER + earlier, "", kept] if kept else []),
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("tracking", text)


if __name__ == "__main__":
    main()
