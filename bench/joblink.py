"""The job link's stop propagation: how long a stop takes from one launcher to the other over
the ZeroMQ channel (in this process: node 0's Hub and node 1's Spoke on loopback), signed with
a job key and unsigned, alternating.

    .venv/bin/python bench/joblink.py [--rounds 200]

Each round tells a failure of a new attempt: node 1 -> node 0 (`Spoke.tell_failed` until
`Hub.stop_reason` has it), then node 0 -> node 1. Writes docs/benchmarks.md section `joblink`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import threading
import time
from pathlib import Path

from benchdoc import alternate, load_text, spread, write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def linked(key):
    from platform_plugin.launcher.servers.hub import Hub
    from platform_plugin.launcher.servers.spoke import Spoke
    from tests.launcher.helpers import free_port_pair
    port = free_port_pair()
    hub = Hub("127.0.0.1", port, 2, key=key, silence_s=60)
    spoke = Spoke("127.0.0.1", port, 1, 2, "node1", key=key, silence_s=60)
    agreeing = threading.Thread(target=lambda: hub.agree({"job_id": "bench"}, 0))
    agreeing.start()
    spoke.agree({"job_id": "bench"}, 0)
    agreeing.join(30)
    return hub, spoke


def stop_round(hub, spoke, counter) -> None:
    """A stop each way, each a new attempt (a stop is said once per attempt)."""
    counter[0] += 1
    spoke.tell_failed("node1", "bench", counter[0])
    with hub.cond:
        assert hub.cond.wait_for(lambda: counter[0] in hub.stops, 10)
    counter[0] += 1
    hub.tell_failed("node0", "bench", counter[0])
    with spoke.cond:
        assert spoke.cond.wait_for(lambda: counter[0] in spoke.stops, 10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    started, load_start = dt.datetime.now(dt.timezone.utc), load_text()
    sides = {"signed": linked(b"k" * 32), "unsigned": linked(None)}
    counters = {name: [0] for name in sides}
    times = alternate({name: (lambda n=name: stop_round(*sides[n], counters[n]))
                       for name in sides}, args.rounds)
    for hub, spoke in sides.values():
        spoke.close()
        hub.close()
    rows = "\n".join(f"| {name} | {spread(values, 'ms', 1000 / 2, 3)} |"
                     for name, values in times.items())
    body = f"""## joblink

Command: `.venv/bin/python bench/joblink.py --rounds {args.rounds}` ({started:%Y-%m-%d %H:%M} UTC;
{load_start} at the start, {load_text()} at the end). node 0's Hub and node 1's Spoke in one
process on loopback; a round = a stop node 1 -> node 0 and one node 0 -> node 1 (each a new
attempt), the figure is half a round: one stop from the call to the other side's state, ZeroMQ
and the link's threads included. Signed (HMAC-SHA256 with a job key) and unsigned alternate
round by round. Median over {args.rounds} rounds (min-max).

| channel | one stop, ms |
|---|---:|
{rows}
"""
    write_section("joblink", body)
    print(body)


if __name__ == "__main__":
    main()
