"""The forwarding helper SIGKILLed mid-delivery, on its REST path (sinks/mlflow_rest.py: a
`platform-run server`-style server with the bulk route, MLflow never imported by the helper)
and on its sqlite path, then `platform-run sync`: every point stored exactly once. A real server, a real launch, a real
kill -9: batches the server committed before the helper could record them are sent again by
sync and must not be stored twice, and the parent's per-step aggregates end complete (sync
recomputes those of the steps it delivers, with the points the helper delivered before)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from platform_plugin.launcher import launch
from tests.tracking.helpers import MlflowServer, wait_for

pytestmark = pytest.mark.slow
STEPS = 40_000  # per rank: 4 of the helper's stream batches (10,000), so the kill lands mid-way
BURST = f"""
import time
from pathlib import Path
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range({STEPS}):
    t.log_metric("loss", float(step))
t.flush()
while not Path("resume").exists():  # the launcher stays up while the test kills its helper
    time.sleep(0.05)
"""


def _delivered(tracking_dir: Path) -> int:
    total = 0
    for state in tracking_dir.glob("rank_*.state.json"):
        try:
            total += json.loads(state.read_text())["delivered"]
        except (OSError, ValueError, KeyError):  # not written yet / being replaced
            pass
    return total


def _stored(store: Path) -> list[tuple[int, int]]:
    """(points, distinct steps) of `loss` per run, straight from the server's store."""
    with sqlite3.connect(store) as db:
        return sorted(db.execute("SELECT COUNT(*), COUNT(DISTINCT step) FROM metrics "
                                 "WHERE key = 'loss' GROUP BY run_uuid").fetchall())


@pytest.mark.parametrize("store", ["rest", "sqlite"])
def test_helper_sigkilled_mid_delivery_then_sync_stores_every_point_once(tracking_env, tmp_path,
                                                                         store):
    """`rest`: a server with the bulk route (the helper's REST calls); `sqlite`: the default
    store in the working folder (the helper's direct SQL writer)."""
    (tmp_path / "burst.py").write_text(BURST)
    tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "3")
    with contextlib.ExitStack() as stack:
        if store == "rest":
            server = stack.enter_context(MlflowServer(tmp_path, bulk=True))
            tracking_env.setenv("MLFLOW_TRACKING_URI", server.url)
        database = tmp_path / ("server" if store == "rest" else "") / "mlflow.db"
        result = _kill_the_helper_mid_delivery(tmp_path)
        assert result.ok, "training must not notice the helper's death"
        cli = str(Path(sys.executable).with_name("platform-run"))
        sync = subprocess.run([cli, "sync", result.job_id, "--wait", "120"], capture_output=True,
                              text=True, timeout=300)
        assert sync.returncode == 0, sync.stdout + sync.stderr
        assert f"delivered {2 * STEPS}, pending 0" in sync.stdout, sync.stdout
        assert _stored(database) == [(STEPS, STEPS)] * 2
        # the parent's aggregates: every step once, the helper's and sync's together
        assert _aggregated(database) == (STEPS, STEPS, 0)
        again = subprocess.run([cli, "sync", result.job_id], capture_output=True, text=True,
                               timeout=300)
        assert again.returncode == 0 and "sent 0 now" in again.stdout, again.stdout
        assert _stored(database) == [(STEPS, STEPS)] * 2


def _aggregated(store: Path) -> tuple[int, int, int]:
    """(points, distinct steps, points whose value is not their step) of the parent's
    `loss/mean` (both ranks log `float(step)` at every step)."""
    with sqlite3.connect(store) as db:
        return db.execute("SELECT COUNT(*), COUNT(DISTINCT step), SUM(value != step) FROM metrics "
                          "WHERE key = 'loss/mean'").fetchone()


def _kill_the_helper_mid_delivery(tmp_path: Path):
    """Launch burst.py on 2 ranks; SIGKILL the forwarding helper once its first batch is
    confirmed (offset files), let the ranks end; the job's result."""
    outcome: dict = {}
    job = threading.Thread(target=lambda: outcome.update(result=launch(
        [sys.executable, "burst.py"], nproc=2, cwd=str(tmp_path), no_system_metrics=True,
        write=lambda text: None)))
    job.start()
    tracking = wait_for(lambda: next((tmp_path / "platform_logs").glob("*/tracking"), None),
                        timeout=120, what="the job's tracking folder")
    wait_for(lambda: _delivered(tracking) > 0, timeout=120, interval=0.005,
             what="the helper's first confirmed batch")
    os.kill(json.loads((tracking / "helper.json").read_text())["pid"], signal.SIGKILL)
    at_kill = _delivered(tracking)
    (tmp_path / "resume").touch()
    job.join(timeout=300)
    assert 0 < at_kill < 2 * STEPS, "the kill must land mid-delivery"
    return outcome["result"]
