"""A/B of the multi-server delivery end to end: 1 launcher x 8 ranks x S steps into
`platform-run server` (PostgreSQL, bulk route), two checkouts of this package alternating.

    .venv/bin/python bench/multiserver_ab.py --a /path/to/old/checkout --b . [--rounds 5]

Each side gets its own `platform-run server` (its own bulk route code) on one PostgreSQL cluster,
and its own launcher, ranks and forwarding helper (PYTHONPATH = that checkout). One unrecorded
1 x 8 x 200-step job per side first (a fresh server's workers set up the store on their first
requests); then the sides alternate every round (ABBA...), each case starting once the previous
case's forwarding helper has ended. Every case is checked: rows = distinct (run, step) = 8 x S.
Prints medians, min-max, points/s and the ratio; writes nothing (quote it with `uptime`).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import multiserver  # bench/multiserver.py: run_case

REPO = Path(__file__).resolve().parents[1]


def start_servers(pg, root: str, sides: dict[str, Path]) -> tuple[dict[str, str], list]:
    from platform_plugin.tracking.server import local as server
    from platform_plugin.util.ports import free_port
    uris, procs = {}, []
    for name, checkout in sides.items():
        folder = os.path.join(root, name)
        os.makedirs(folder)
        env = {"MLFLOW_BACKEND_STORE_URI": pg.uri,  # the route's code from this side's checkout
               "PYTHONPATH": server.app_env(folder)["PYTHONPATH"].replace(str(REPO), str(checkout))}
        port = free_port()
        proc = server.start_server("", port, log_path=Path(folder) / "mlflow-server.log", env=env,
                                   command=server.team_server_command("127.0.0.1", port, 4,
                                                                      os.path.join(root, "art")))
        procs.append(proc)
        uris[name] = f"http://127.0.0.1:{port}"
        server.wait_healthy(uris[name], proc, log_path=Path(folder) / "mlflow-server.log", timeout=300)
    return uris, procs


def wait_helpers(prefix: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and subprocess.run(
            ["pgrep", "-f", f"platform_plugin.tracking.delivery.helper {prefix}"], capture_output=True).stdout:
        time.sleep(0.2)


def one(name: str, checkout: Path, steps: int, uri: str, pg_uri: str) -> float:
    multiserver.REPO = checkout  # the launcher's and ranks' PYTHONPATH
    work = Path(tempfile.mkdtemp(prefix=f"bench-ab-{name}-"))
    try:
        out = multiserver.run_case(1, 8, steps, uri, pg_uri, work)
        wait_helpers(str(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not out["rows"] == out["distinct"] == 8 * steps:
        raise SystemExit(f"{name}: {out['rows']} rows, {out['distinct']} distinct of {8 * steps}")
    return out["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--a", required=True, type=Path, help="a checkout of this package")
    parser.add_argument("--b", default=REPO, type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10000)
    args = parser.parse_args()
    sides = {"a": args.a.resolve(), "b": args.b.resolve()}
    from platform_plugin.tracking.server.postgres import LocalPostgres
    from platform_plugin.tracking.server.local import stop_server
    from platform_plugin.util.ports import free_port
    root = tempfile.mkdtemp(prefix="bench-ab-pg-")
    os.chmod(root, 0o755)
    pg = LocalPostgres(os.path.join(root, "data"), free_port())
    pg.start()
    procs: list = []
    times: dict[str, list[float]] = {name: [] for name in sides}
    print(f"load at the start: {os.getloadavg()}", flush=True)
    try:
        uris, procs = start_servers(pg, root, sides)
        for name in sides:
            one(name, sides[name], 200, uris[name], pg.uri)  # warm-up, not recorded
        for round_no in range(args.rounds):
            for name in (sides if round_no % 2 == 0 else list(sides)[::-1]):
                times[name].append(one(name, sides[name], args.steps, uris[name], pg.uri))
                print(name, f"{times[name][-1]:.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for proc in procs:
            stop_server(proc)
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    points = 8 * args.steps
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name} ({sides[name]}): median {med[name]:.2f} s ({min(t):.2f}-{max(t):.2f}) = "
              f"{points / med[name]:,.0f} points/s end to end")
    print(f"a/b = {med['a'] / med['b']:.2f}x; load at the end: {os.getloadavg()}")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
