"""Builders for rank tables, .env files and crafted rank processes used by the foundation tests."""
from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import RANKTABLES

SAMPLES = sorted(RANKTABLES.glob("*.json"))
TABLE_4P = RANKTABLES / "hccl_4p_4567_10.0.0.1.json"
TABLE_8P = RANKTABLES / "hccl_8p_01234567_10.0.0.1.json"
TABLE_2S = RANKTABLES / "hccl_2s_16p.json"
HCCN_CONF = RANKTABLES / "hccn.conf.sample"


def sample(path: Path = TABLE_2S) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def table_dict(servers: int = 1, cards: int = 8, *, first_octet: int = 10) -> dict:
    """A valid HCCL 1.0 table with `servers` servers of `cards` devices, all values strings."""
    server_list, rank = [], 0
    for s in range(servers):
        devices = []
        for d in range(cards):
            devices.append({"device_id": str(d), "device_ip": f"192.{100 + d}.{s // 250}.{s % 250}",
                            "rank_id": str(rank)})
            rank += 1
        server_list.append({"server_id": f"{first_octet}.0.{s // 250}.{s % 250 + 1}",
                            "device": devices, "host_nic_ip": "reserve"})
    return {"version": "1.0", "server_count": str(servers), "server_list": server_list,
            "status": "completed"}


def mutated(doc: dict, change) -> dict:
    doc = copy.deepcopy(doc)
    change(doc)
    return doc


def write_json(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc, indent=4), encoding="utf-8")
    return path


def codes(problems) -> set[str]:
    return {p.code for p in problems}


@contextmanager
def rank_processes(envs: list[dict[str, str]], *, argv: list[str] | None = None):
    """Real processes (sleep) with crafted rank variables, as a launcher or a user script would
    start them; always killed on exit. Yields their Popen objects."""
    procs = []
    try:
        for env in envs:
            command = argv or [sys.executable, "-c", "import time; time.sleep(120)"]
            procs.append(subprocess.Popen(command, env={**os.environ, **env},
                                          start_new_session=True))
        _wait_environ_visible(procs)
        yield procs
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _wait_environ_visible(procs) -> None:
    # until exec completes, /proc/<pid> still shows the forked parent (cmdline and environ)
    deadline = time.monotonic() + 30
    for proc in procs:
        while time.monotonic() < deadline:
            try:
                if b"sleep" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                    break
            except OSError:
                pass
            time.sleep(0.02)
