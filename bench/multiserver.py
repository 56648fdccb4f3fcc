"""Multi-server delivery benchmark: L launchers (simulated servers, `--nnodes L` on loopback,
one log folder each) x R ranks x S steps into ONE tracking store, end to end.

    .venv/bin/python bench/multiserver.py [--rounds 1] [--steps 10000] [--cases 1x8,4x8]
        [--stores postgres-auth,postgres,sqlite,postgres-logbatch]

Stores: `sqlite` = a fresh sqlite file every launcher writes directly (SQL fast path);
`postgres-auth` = `platform-run server`'s MLflow as it runs by default (4 workers, bulk metrics
route, MLflow's basic-auth app with team_auth's settings; the launchers send the admin's
credentials, as a team's `.env` does); `postgres-auth-nocache` = the same with MLflow's
credential cache off (`auth_cache_ttl_seconds = 0`: every request's password checked against
its hash); `postgres` = the same server without authentication (`--no-auth`);
`postgres-logbatch` = a plain `mlflow server` (4 workers, MLflow's own app), i.e. the
`log_batch` fallback. All on one fresh PostgreSQL 15 cluster. The stores of a round are run one
after the other, in the opposite order the next round (alternating), every case in each.
Time = launchers started to every launcher returned (a launcher returns once its last point
was accepted); a poller also notes when the first point was in the store, so `delivering` =
first point stored -> all stored (what remains once MLflow is imported and the runs exist).
Then the store's metrics table is counted: rows and distinct (run, step) = L*R*S means every
point present and none twice. Writes docs/benchmarks.md section `multiserver`.
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
import threading
import time
from pathlib import Path

from benchdoc import load_text, write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from platform_plugin.tracking.server.team_auth import AUTH_CACHE_TTL_S  # noqa: E402
GOAL = 10_000  # points/s from one launcher of 8 ranks into the PostgreSQL-backed server
MIN_DELIVERING_S = 1.0  # shorter than this after the first stored point: too short to rate

RANK_SCRIPT = """
import os
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(int(os.environ["BENCH_STEPS"])):
    t.log_metric("loss", 1.0 / (step + 1), step=step)
"""
COUNT_SQL = ("SELECT count(*), count(DISTINCT m.run_uuid || '/' || CAST(m.step AS VARCHAR)) "
             "FROM metrics m JOIN runs r ON m.run_uuid = r.run_uuid JOIN experiments e ON "
             "r.experiment_id = e.experiment_id WHERE e.name = :name AND m.key = 'loss'")


def count(db_uri: str, experiment: str) -> tuple[int, int]:
    import sqlalchemy
    engine = sqlalchemy.create_engine(db_uri)
    try:
        with engine.connect() as conn:
            row = conn.execute(sqlalchemy.text(COUNT_SQL), {"name": experiment}).one()
    finally:
        engine.dispose()
    return int(row[0]), int(row[1])


class FirstPoint:
    """Polls the store (0.25 s) for the first stored point of the experiment."""

    def __init__(self, db_uri: str, experiment: str, start: float):
        self.db_uri, self.experiment, self.start = db_uri, experiment, start
        self.at: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set() and self.at is None:
            try:
                if count(self.db_uri, self.experiment)[0]:
                    self.at = time.perf_counter() - self.start
            except Exception:  # noqa: BLE001 - the store does not exist yet
                pass
            self.stop.wait(0.25)


def run_case(launchers: int, ranks: int, steps: int, uri: str, db_uri: str, work: Path,
             credentials: dict[str, str] | None = None) -> dict:
    """`credentials`: MLFLOW_TRACKING_USERNAME/PASSWORD for a server with authentication."""
    from platform_plugin.util.ports import free_port
    script = work / "rank.py"
    script.write_text(RANK_SCRIPT)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "BENCH_STEPS": str(steps),
           "MLFLOW_EXPERIMENT_NAME": work.name, "PLATFORM_TRACKING_DRAIN_TIMEOUT": "900",
           "PYTHONPATH": str(REPO), **(credentials or {})}
    port = free_port()
    start = time.perf_counter()
    poller = FirstPoint(db_uri, work.name, start)
    errs = [open(work / f"server{n}.err", "wb") for n in range(launchers)]  # why one failed
    procs = [subprocess.Popen([sys.executable, "-m", "platform_plugin", "launch", "--log-dir",
                               str(work / f"server{n}"), "--tracking", "mlflow", "--nproc",
                               str(ranks), "--nnodes", str(launchers), "--node-rank", str(n),
                               "--master-port", str(port), "--backend", "plain", "--show",
                               "none", "--no-system-metrics", "--", sys.executable, str(script)],
                              cwd=str(work), env=env, stdout=subprocess.DEVNULL, stderr=errs[n])
             for n in range(launchers)]
    codes = [p.wait() for p in procs]
    for err in errs:
        err.close()
    elapsed = time.perf_counter() - start
    poller.stop.set()
    if any(codes):
        raise SystemExit(f"a launcher failed: {codes} (see {work})")
    total, distinct = count(db_uri, work.name)
    return {"seconds": elapsed, "first": poller.at, "rows": total, "distinct": distinct}


# store -> (bulk route, auth_cache_ttl_seconds or None for no authentication)
SERVERS = {"postgres-auth": (True, "default"), "postgres-auth-nocache": (True, 0),
           "postgres": (True, None), "postgres-logbatch": (False, None)}


class Servers:
    """One PostgreSQL cluster and an MLflow server on it per store of SERVERS asked for:
    `uris[store]`, and `credentials[store]` (the client's variables) for those with
    authentication, which share one admin and one users' database."""

    def __init__(self, stores: list[str]):
        self.stores = [store for store in stores if store in SERVERS]

    def __enter__(self):
        from platform_plugin.tracking.server import team_auth
        from platform_plugin.tracking.server.postgres import LocalPostgres
        from platform_plugin.tracking.server.local import (migrate_team_stores, start_team_server,
                                                           wait_healthy)
        from platform_plugin.util.ports import free_port
        self.root = tempfile.mkdtemp(prefix="bench-pg-")
        os.chmod(self.root, 0o755)
        self.pg = LocalPostgres(os.path.join(self.root, "data"), free_port())
        self.pg.start()
        self.procs, self.uris, self.credentials = [], {}, {}
        admin, _ = team_auth.load_or_create(Path(self.root))
        for store in self.stores:
            bulk, cache_ttl_s = SERVERS[store]
            port, folder = free_port(), os.path.join(self.root, store)
            os.makedirs(folder)
            auth_env = None
            if cache_ttl_s is not None:
                self.pg.create_database(team_auth.AUTH_DATABASE)
                auth_env = team_auth.server_env(
                    Path(folder), admin, self.pg.database_uri(team_auth.AUTH_DATABASE),
                    **({} if cache_ttl_s == "default" else {"cache_ttl_s": cache_ttl_s}))
                self.credentials[store] = {"MLFLOW_TRACKING_USERNAME": admin.admin_username,
                                           "MLFLOW_TRACKING_PASSWORD": admin.admin_password}
            migrate_team_stores(self.pg.uri, folder=folder, auth_env=auth_env)
            proc = start_team_server(self.pg.uri, "127.0.0.1", port, workers=4, bulk=bulk,
                                     artifacts=os.path.join(self.root, "art"), folder=folder,
                                     auth_env=auth_env)
            self.procs.append(proc)
            self.uris[store] = f"http://127.0.0.1:{port}"
            wait_healthy(self.uris[store], proc, log_path=os.path.join(folder, "mlflow-server.log"),
                         timeout=300)
        return self

    def __exit__(self, *exc):
        from platform_plugin.tracking.server.local import stop_server
        for proc in self.procs:
            stop_server(proc)
        self.pg.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--cases", default="1x8,4x8")
    parser.add_argument("--stores", default="postgres-auth,postgres,sqlite,postgres-logbatch")
    parser.add_argument("--logbatch-cases", default="1x8",
                        help="cases run against the plain server too (slow: log_batch)")
    args = parser.parse_args()
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    stores = args.stores.split(",")
    load_start = load_text()
    results: dict[tuple, list[dict]] = {}
    with Servers(stores) as servers:
        warm_up(servers, stores)
        for round_no in range(args.rounds):
            for store in (stores if round_no % 2 == 0 else stores[::-1]):
                for launchers, ranks in cases:
                    if store == "postgres-logbatch" and f"{launchers}x{ranks}" not in args.logbatch_cases:
                        continue
                    work = Path(tempfile.mkdtemp(prefix=f"bench-ms-{store}-{launchers}x{ranks}-"))
                    sqlite = f"sqlite:///{work / 'mlflow.db'}"
                    uri = servers.uris.get(store, sqlite)
                    db = servers.pg.uri if store.startswith("postgres") else sqlite
                    result = run_case(launchers, ranks, args.steps, uri, db, work,
                                      servers.credentials.get(store))
                    results.setdefault((store, launchers, ranks), []).append(result)
                    print(store, f"{launchers}x{ranks}", result, f"load {os.getloadavg()[0]:.1f}",
                          flush=True)
                    shutil.rmtree(work, ignore_errors=True)
    write(results, args, load_start, load_text())


def warm_up(servers: Servers, stores: list[str]) -> None:
    """One unrecorded 1 x 8 x 200-step job per server: a fresh server's workers set up the store
    on their first requests (0.5-0.9 s each measured), which a team's long-running server has
    done long before; not counted in any round."""
    for store in stores:
        if store in servers.uris:
            work = Path(tempfile.mkdtemp(prefix=f"bench-ms-warm-{store}-"))
            run_case(1, 8, 200, servers.uris[store], servers.pg.uri, work,
                     servers.credentials.get(store))
            shutil.rmtree(work, ignore_errors=True)


def verdict(results, steps: int) -> list[str]:
    """The goal, on the team server as it runs by default (authentication on), and what
    authentication costs: the same server without it, and with MLflow's credential cache off,
    in the same rounds."""
    rates = {store: 8 * steps / statistics.median(r["seconds"] for r in results[(store, 1, 8)])
             for store in ("postgres-auth", "postgres-auth-nocache", "postgres")
             if (store, 1, 8) in results}
    if "postgres-auth" not in rates:
        return ["- 1 x 8 into the PostgreSQL server with authentication not measured."]
    lines = [f"- Goal >= {GOAL:,} points/s end to end from one launcher of 8 ranks into "
             "`platform-run server` on PostgreSQL with authentication on (the admin's "
             f"credentials): {rates['postgres-auth']:,.0f} points/s — "
             f"**{'meets' if rates['postgres-auth'] >= GOAL else 'misses'}**."]
    for store, what in (("postgres", "without authentication"),
                        ("postgres-auth-nocache", "with authentication, credential cache off")):
        if store in rates:
            lines.append(f"- The same server {what}, in the same rounds: {rates[store]:,.0f} "
                         f"points/s (auth on / this: {rates['postgres-auth'] / rates[store]:.2f}x).")
    return lines


WHERE_THE_TIME_GOES = [
    "- Where the time goes (1 x 8 into `platform-run server`, measured on this machine "
    "2026-11-30 17:30-18:05 UTC, load 4-7 from other jobs): the forwarding helper no longer "
    "imports MLflow (2-3.4 s of CPU before) - into a server with the bulk route it makes the "
    "experiment, runs, tags, params, ends and rank-log uploads with MLflow's REST API and the "
    "stdlib (`tracking/sinks/mlflow_rest.py`); timeline of one job at load 5: helper started "
    "+0.9 s after the launcher, route asked and experiment + parent + 8 runs made by +1.5 s "
    "(12-25 ms a call on a warm server; a fresh server's workers take 0.5-0.9 s on their first "
    "requests), first point stored +4.9 s, all 80,000 +6.2 s. What is left is the delivery "
    "itself on 2 shared cores: the helper decodes 80,000 spool lines and computes the per-step "
    "aggregates (~1.5 s of CPU under cProfile), the server parses each 20,000-point request "
    "and INSERTs it (py-spy of the workers: the INSERT ~40 %, json.loads ~15 %; converting every "
    "point twice was another ~37 %, now once). One 20,000-point request took 1.2-1.8 s at load 4-5.",
    "- A/B against the code before (8ca6303) with `bench/multiserver_ab.py --a <checkout of "
    "8ca6303> --rounds N` (each side its own `platform-run server` on one PostgreSQL, its own "
    "launcher and helper; sides alternating; every case 80,000 rows, 80,000 distinct): "
    "2026-11-30 17:58-18:02 UTC, 5 rounds, load 5.6-6.9: 12.05 s vs 7.57 s median (6,639 vs "
    "10,563 points/s, 1.59x); 18:08 UTC, 2 rounds, load 5.9-6.7: 13.13 s vs 7.57 s (6,095 vs "
    "10,564 points/s, 1.73x); 17:40 UTC, 4 rounds, load 3.7-4.3, the helper's REST calls only "
    "(one server for both sides): 8.64 s vs 4.63 s (9,256 vs 17,289 points/s, 1.87x); the final "
    "code (2a92d59), 18:21-18:24 UTC, 3 rounds, load 5.5-6.3: 10.15 s vs 5.89 s (7,882 vs "
    "13,586 points/s, 1.72x). The "
    "margin over the goal shrinks with the load: on 2 cores the delivery competes with whatever "
    "else runs.",
    "- The bulk route's checks of every point by MLflow's rules (`check_points`: names, numbers, "
    'int64 steps and timestamps, before the database): A/B with `bench/multiserver_ab.py --a '
    '<checkout of 87a4c80> --rounds 4`, run three times, 2026-12-03 20:27-21:03 UTC, load 6.1-37 '
    "on the 2 cores (the other engineers' runs): 1 x 8 x 10,000 points into `platform-run server`"
    ' on PostgreSQL, every case 80,000 rows, 80,000 distinct; over the 12 rounds of each side, '
    'before 9.14 s median (5.64-22.56) = 8,753 points/s, with the checks 8.14 s (5.53-19.02) = '
    '9,828 points/s (the three runs alone: 0.90x, 1.34x and 1.14x; the last, at load 6-9: 8.90 s '
    'vs 7.79 s, 8,987 vs 10,274 points/s) - the load decides, not the checks. In one process, '
    'parsing a 20,000-point request took 41.6 ms at best and parsing + checking it 52.9 ms: about'
    " 0.6 µs a point of the server's Python. At this load both sides are at or under the 10,000 "
    'points/s goal.',
    "- Authentication (the table above, 2026-12-03 21:50-21:53 UTC, 3 rounds, the three servers "
    "alternating, load 3.1 at the first case to 8.2 at the last as other jobs started): "
    "MLflow's basic-auth app checks the password against its scrypt hash at least twice a "
    "request (its gate, its admin check; the bulk route asks again); `auth_cache_ttl_seconds = "
    "30` (team_auth.py) makes that a lookup after a worker's first check. With the cache, auth "
    "on cost 0.5 s of the median (7.0 s vs 6.5 s, 0.93x the points/s of the same server "
    "without authentication, within the rounds' spread); with the cache off 16.4 s (4,880 "
    "points/s: 2.3x slower than with it, under the goal). Per round, auth on / off / cache off: "
    "5.9 / 5.9 / 12.3 s, 7.0 / 6.5 / 16.4 s, 8.4 / 12.9 / 32.9 s. Not in this run: the sqlite "
    "and 4 x 8 cases (earlier, 2026-12-01, without authentication: 4 x 8 x 10,000 points into "
    "one server in 21.6 s, every point present and none twice).",
    "- `postgres-logbatch` (a plain `mlflow server`, the fallback): MLflow's `log_batch` "
    "handler, ~0.4 ms of protobuf + ORM work per point in the server (py-spy: "
    "`SqlAlchemyStore._log_metrics` ~75 % of the workers' busy samples), 1,000 points a request.",
]


def four_launchers(results, steps: int) -> list[str]:
    runs = results.get(("postgres-auth", 4, 8)) or results.get(("postgres", 4, 8))
    if not runs:
        return []
    points = 32 * steps
    ok = all(r["rows"] == r["distinct"] == points for r in runs)
    return [f"- 4 launchers x 8 ranks x {steps:,} steps into one server: {points:,} points, "
            f"{statistics.median(r['seconds'] for r in runs):.1f} s end to end (median), every "
            f"point present and none twice: {'yes' if ok else 'NO'}."]


def write(results, args, load_start: str, load_end: str) -> None:
    lines = ["## multiserver", "",
             f"Command: `.venv/bin/python bench/multiserver.py --rounds {args.rounds} --steps "
             f"{args.steps} --cases {args.cases} --stores {args.stores}` "
             f"({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; {load_start} at the start, "
             f"{load_end} at the end: 2 cores shared with other jobs, absolute figures are "
             "noisy). L launchers (simulated servers on loopback, `--nnodes L`) x R ranks x S "
             "steps of `loss` into one store. `postgres-auth` = `platform-run server`'s MLflow "
             "as it runs by default (4 workers, bulk metrics route, MLflow's basic-auth app with "
             "its credential cache of `auth_cache_ttl_seconds` = "
             f"{AUTH_CACHE_TTL_S} s; the launchers send the admin's credentials); "
             "`postgres-auth-nocache` = the same with that cache off; `postgres` = the same "
             "server without authentication (`--no-auth`); all on PostgreSQL 15; "
             "`postgres-logbatch` = a plain "
             "`mlflow server` (4 workers) on the same database (the `log_batch` fallback); "
             "`sqlite` = one sqlite file written directly. End to end = launchers started to "
             "every launcher returned (after its last point was accepted; includes the "
             "interpreters, the ranks, the forwarding helper's MLflow import and the runs' "
             "creation); first stored = when the first point was in the store (polled every "
             "0.25 s: a whole first request may already be in); delivering = points / (end - "
             "first stored), median over the rounds where that was at least 1 s, else `-`. "
             "Median over rounds (min-max). Before the rounds, one unrecorded 1 x 8 x 200-step "
             "job per server (a fresh server's workers set up the store on their first requests).", "",
             "| store | launchers x ranks | points | end to end s | points/s end to end | "
             "first stored s | points/s delivering | rows in store | distinct (run, step) | "
             "duplicates |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (store, launchers, ranks), runs in results.items():
        points = launchers * ranks * args.steps
        secs = [r["seconds"] for r in runs]
        firsts = [r["first"] for r in runs if r["first"] is not None]
        med, first = statistics.median(secs), statistics.median(firsts) if firsts else None
        spread = f"{med:.1f} ({min(secs):.1f}-{max(secs):.1f})" if len(secs) > 1 else f"{med:.1f}"
        rates = [points / (r["seconds"] - r["first"]) for r in runs
                 if r["first"] is not None and r["seconds"] - r["first"] >= MIN_DELIVERING_S]
        delivering = f"{statistics.median(rates):,.0f}" if rates else "-"
        last = runs[-1]
        lines.append(f"| {store} | {launchers} x {ranks} | {points:,} | {spread} | "
                     f"{points / med:,.0f} | {first if first is None else f'{first:.1f}'} | "
                     f"{delivering} | {last['rows']:,} | {last['distinct']:,} | "
                     f"{last['rows'] - last['distinct']} |")
    complete = all(r["rows"] == r["distinct"] == launchers * ranks * args.steps
                   for (_, launchers, ranks), runs in results.items() for r in runs)
    lines += ["", *verdict(results, args.steps), *four_launchers(results, args.steps),
              f"- Every point present and none twice in every run: "
              f"{'yes' if complete else 'NO (see the table)'}.", *WHERE_THE_TIME_GOES]
    print("\n".join(line for line in lines if line.startswith("- ") and line not in WHERE_THE_TIME_GOES))
    write_section("multiserver", "\n".join(lines))


if __name__ == "__main__":
    main()
