"""A store that goes away while the job runs is said while it runs, not only in the end report:
a real `mlflow server` killed once the first points are in, two real ranks that keep logging,
the launcher's own output read while they still run; its return said once too. The start's
check (store_check.py) sees nothing wrong here: the server answered then."""
from __future__ import annotations

import sys
import threading

import pytest

from platform_plugin.launcher import launch
from tests.tracking.helpers import MlflowServer, wait_for
from tests.tracking.test_launched_jobs import delivered_per_stream

pytestmark = pytest.mark.slow

# 20 points, then wait for `lost` (the test kills the server meanwhile), 20 more, then wait for
# `finish`: the ranks run until the test has read what the launcher said
RANK = """
import time
from pathlib import Path
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(40):
    if step in (20, 39):
        t.flush()
        flag = Path("lost" if step == 20 else "finish")
        while not flag.exists():
            time.sleep(0.05)
    t.log_metric("loss", 1.0 / (step + 1))
"""
STOPPED = "tracking: the store stopped taking the job's points ("


def test_a_store_lost_mid_job_is_said_while_the_ranks_run_and_once(tracking_env, tmp_path):
    server = MlflowServer(tmp_path)
    shown: list[str] = []
    try:
        server.start()
        tracking_env.setenv("MLFLOW_TRACKING_URI", server.url)
        tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "3")
        (tmp_path / "rank.py").write_text(RANK)
        outcome = {}
        job = threading.Thread(target=lambda: outcome.update(result=launch(
            [sys.executable, "rank.py"], nproc=2, backend="plain", cwd=str(tmp_path),
            write=shown.append, no_system_metrics=True)))
        job.start()
        wait_for(lambda: delivered_per_stream(tmp_path) == {"rank_0": 20, "rank_1": 20},
                 timeout=180, what="the first 20 points of each rank delivered")
        assert not any(STOPPED in text for text in shown)  # the store took them: nothing said
        server.kill()
        (tmp_path / "lost").touch()
        # the ranks wait for `finish`: what is said now is said while they run
        said = wait_for(lambda: [t for t in shown if STOPPED in t], timeout=120,
                        what="the lost store said while the ranks run")
        assert "unreachable" in said[0] and "platform-run sync" in said[0], said
        (tmp_path / "finish").touch()
        job.join(timeout=300)
        result = outcome["result"]
        assert result.ok and result.tracking.pending > 0  # the end report says it as before
        assert f"platform-run sync {result.job_id}" in result.tracking.reason
        assert sum(STOPPED in text for text in shown) == 1, shown  # said once
        assert not any("takes the job's points again" in text for text in shown)
    finally:
        (tmp_path / "lost").touch()
        (tmp_path / "finish").touch()
        server.close()
