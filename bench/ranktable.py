"""Parse + validate a 1024-rank (128-server) HCCL table: platform_plugin vs a plain baseline.

Baseline: `json.loads` plus the minimal loop a launcher script does by hand (find this rank's
device, count ranks) — what the plugin's full rule set costs on top of reading the file.
Goal: plugin parse + validate <= 20 ms. Then `platform-run ranktable show` end to end (the
console script, output to /dev/null) of tables of 10,000 / 30,000 / 100,000 devices: its time
per device must stay flat (linear; goal: at 100,000 at most 1.5x the per-device time at 10,000).
Writes docs/benchmarks.md section `ranktable`.
Run: .venv/bin/python bench/ranktable.py
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import alternate, load_text, write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from tests.ranktable.samples import table_dict  # noqa: E402
from platform_plugin import ranktable  # noqa: E402

GOAL_MS = 20.0
SHOW_SERVERS = (1250, 3750, 12500)  # x 8 devices: 10,000 / 30,000 / 100,000
SHOW_ROUNDS = 3
SHOW_GOAL = 1.5  # per-device time at the largest table / at the smallest
REPEAT = 200
SECTION = "ranktable"


def baseline(path: str) -> int:
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    size = 0
    for server in doc["server_list"]:
        for device in server["device"]:
            size += 1
            if device["rank_id"] == "1000":
                _ = int(device["device_id"])
    return size


def plugin(path: str) -> int:
    table, problems = ranktable.check_file(path)
    assert table is not None and not problems, problems
    return table.rank_size


def timed(func, path: str) -> list[float]:
    func(path)  # warm caches
    samples = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        func(path)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "hccl_128s_1024p.json")
        Path(path).write_text(json.dumps(table_dict(servers=128, cards=8), indent=4))
        size_kb = Path(path).stat().st_size / 1024
        assert plugin(path) == baseline(path) == 1024
        base, plug = timed(baseline, path), timed(plugin, path)
    med_b, med_p = statistics.median(base), statistics.median(plug)
    p95_p = sorted(plug)[int(0.95 * len(plug)) - 1]
    verdict = "meets" if med_p <= GOAL_MS else "MISSES"
    lines = [
        f"1024 ranks / 128 servers, {size_kb:.0f} KiB file, {REPEAT} runs each, median (p95):",
        "",
        "| what | median ms | p95 ms |",
        "|---|---|---|",
        f"| baseline: json.load + hand loop | {med_b:.2f} | {sorted(base)[int(0.95 * REPEAT) - 1]:.2f} |",
        f"| platform_plugin: parse + validate (all rules) | {med_p:.2f} | {p95_p:.2f} |",
        "",
        f"1024-rank table check: {med_p:.2f} ms median (goal <= {GOAL_MS:.0f} ms: {verdict}); "
        f"{med_p / med_b:.1f}x the bare json.load + hand loop.",
    ]
    show_lines, show_ok = show_scale()
    lines += ["", *show_lines]
    print("\n".join(lines))
    write_results(lines)
    return 0 if med_p <= GOAL_MS and show_ok else 1


def show_scale() -> tuple[list[str], bool]:
    """`platform-run ranktable show` of ever larger tables, rounds alternating the sizes."""
    cli = str(Path(sys.executable).with_name("platform-run"))
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for servers in SHOW_SERVERS:
            paths[servers] = str(Path(folder) / f"hccl_{servers}s.json")
            Path(paths[servers]).write_text(json.dumps(table_dict(servers=servers, cards=8)))
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        times = alternate({servers: lambda path=paths[servers]: subprocess.run(
            [cli, "ranktable", "show", path], check=True, stdout=subprocess.DEVNULL, env=env)
            for servers in SHOW_SERVERS}, SHOW_ROUNDS)
    per_device = {s: statistics.median(t) / (s * 8) * 1e6 for s, t in times.items()}
    growth = per_device[SHOW_SERVERS[-1]] / per_device[SHOW_SERVERS[0]]
    ok = growth <= SHOW_GOAL
    lines = [f"`platform-run ranktable show FILE` end to end (console script, output to /dev/null), "
             f"median of {SHOW_ROUNDS} alternating rounds:", "",
             "| devices | seconds | µs per device |", "|---|---|---|"]
    lines += [f"| {s * 8:,} | {statistics.median(times[s]):.2f} | {per_device[s]:.1f} |"
              for s in SHOW_SERVERS]
    lines += ["", f"`ranktable show` per-device time at {SHOW_SERVERS[-1] * 8:,} / at {SHOW_SERVERS[0] * 8:,}: "
              f"{growth:.2f}x (goal <= {SHOW_GOAL}x, linear: {'meets' if ok else 'MISSES'})."]
    return lines, ok


def write_results(lines: list[str]) -> None:
    write_section(SECTION, "\n".join([
        f"## {SECTION}", "",
        f"Command: `.venv/bin/python bench/ranktable.py` — "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{load_text()} at the end (a shared machine: absolute times are noisy).", "", *lines]))


if __name__ == "__main__":
    sys.exit(main())
