"""Multi-server delivery benchmark: L launchers (simulated servers, `--nnodes L` on loopback,
one log folder each) x R ranks x S steps into ONE tracking store, end to end.

    .venv/bin/python bench/multiserver.py [--steps 10000] [--cases 1x8,4x8,1x32] [--stores sqlite,postgres]

Stores: `sqlite` = a fresh sqlite file every launcher writes directly; `postgres` = a real
`mlflow server` (4 workers, as `platform-run server` runs it) on a fresh PostgreSQL cluster.
Time = the launchers started to every launcher returned (which is after its last point was
accepted). Then the store's metrics table is counted: rows, distinct (run, key, step), expected
L*R*S: every point present and no duplicate. Writes docs/benchmarks.md section `multiserver`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
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


def run_case(launchers: int, ranks: int, steps: int, uri: str, work: Path) -> float:
    from platform_plugin.util.ports import free_port
    script = work / "rank.py"
    script.write_text(RANK_SCRIPT)
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "BENCH_STEPS": str(steps),
           "MLFLOW_EXPERIMENT_NAME": work.name, "PLATFORM_TRACKING_DRAIN_TIMEOUT": "600",
           "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "platform_plugin", "launch", "--log-dir",
                               str(work / f"server{n}"), "--tracking", "mlflow", "--nproc",
                               str(ranks), "--nnodes", str(launchers), "--node-rank", str(n),
                               "--master-port", str(port), "--backend", "plain", "--show",
                               "none", "--no-system-metrics", "--", sys.executable, str(script)],
                              cwd=str(work), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
             for n in range(launchers)]
    codes = [p.wait() for p in procs]
    elapsed = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"a launcher failed: {codes} (see {work})")
    return elapsed


def count(db_uri: str, experiment: str) -> tuple[int, int]:
    import sqlalchemy
    engine = sqlalchemy.create_engine(db_uri)
    with engine.connect() as conn:
        row = conn.execute(sqlalchemy.text(
            "SELECT count(*), count(DISTINCT m.run_uuid || '/' || m.key || '/' || "
            "CAST(m.step AS VARCHAR)) FROM metrics m JOIN runs r ON m.run_uuid = r.run_uuid "
            "JOIN experiments e ON r.experiment_id = e.experiment_id WHERE e.name = :name "
            "AND m.key = 'loss'"), {"name": experiment}).one()
    engine.dispose()
    return int(row[0]), int(row[1])


class Postgres:
    def __enter__(self):
        from platform_plugin.tracking.postgres import LocalPostgres
        from platform_plugin.tracking.server import start_server, team_server_command, wait_healthy
        from platform_plugin.util.ports import free_port
        self.root = tempfile.mkdtemp(prefix="bench-pg-")
        os.chmod(self.root, 0o755)
        self.pg = LocalPostgres(os.path.join(self.root, "data"), free_port())
        self.pg.start()
        port = free_port()
        log = os.path.join(self.root, "mlflow.log")
        self.proc = start_server("", port, log_path=log, env={"MLFLOW_BACKEND_STORE_URI": self.pg.uri},
                                 command=team_server_command("127.0.0.1", port, 4,
                                                             os.path.join(self.root, "art")))
        self.uri = f"http://127.0.0.1:{port}"
        wait_healthy(self.uri, self.proc, log_path=log, timeout=300)
        return self

    def __exit__(self, *exc):
        from platform_plugin.tracking.server import stop_server
        stop_server(self.proc)
        self.pg.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--cases", default="1x8,2x8,4x8,1x32")
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    rows = []
    for store in args.stores.split(","):
        pg = Postgres().__enter__() if store == "postgres" else None
        try:
            for launchers, ranks in cases:
                work = Path(tempfile.mkdtemp(prefix=f"bench-ms-{store}-{launchers}x{ranks}-"))
                db = f"sqlite:///{work / 'mlflow.db'}"
                uri = pg.uri if pg else db
                elapsed = run_case(launchers, ranks, steps=args.steps, uri=uri, work=work)
                total, distinct = count(pg.pg.uri if pg else db, work.name)
                expected = launchers * ranks * args.steps
                rows.append((store, launchers, ranks, expected, elapsed, total, distinct))
                print(rows[-1], flush=True)
                shutil.rmtree(work, ignore_errors=True)
        finally:
            if pg:
                pg.__exit__(None, None, None)
    write(rows, args)


def write(rows, args) -> None:
    load = os.getloadavg()
    lines = ["## multiserver", "",
             f"Command: `.venv/bin/python bench/multiserver.py --steps {args.steps} --cases "
             f"{args.cases} --stores {args.stores}` ({dt.datetime.utcnow():%Y-%m-%d %H:%M} UTC, 2 "
             f"cores shared with ~8 other agents: load average {load[0]:.1f} at the end). L "
             "launchers (simulated servers on loopback, `--nnodes L`) x R ranks x S steps of "
             "`loss` into one store; time = launchers started to every launcher returned "
             "(after its last point was accepted).", "",
             "| store | launchers x ranks | points | seconds | points/s | rows in store | "
             "distinct (run, step) | duplicates |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for store, launchers, ranks, expected, elapsed, total, distinct in rows:
        lines.append(f"| {store} | {launchers} x {ranks} | {expected:,} | {elapsed:.1f} | "
                     f"{expected / elapsed:,.0f} | {total:,} | {distinct:,} | {total - distinct} |")
    write_section("multiserver", "\n".join(lines))


if __name__ == "__main__":
    main()
