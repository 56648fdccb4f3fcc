"""A sink call that never returns must not keep the forwarding helper alive for good. The
platform's wflogger SDK is private: tests/assets/tracking/wf_analyse is a STAND-IN whose calls
hang when WFLOGGER_STANDIN_HANG is set (a network call without a timeout)."""
from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from platform_plugin import launch
from platform_plugin.util.procfs import alive
from tests.helpers import wait_for

pytestmark = pytest.mark.slow

LOGS = "from platform_plugin import tracking\ntracking.get_tracker().log_metric('loss', 1.0, step=0)\n"


def test_a_hung_wflogger_call_fails_after_its_timeout_and_the_helper_ends(
        tracking_env, tmp_path, wflogger_standin):
    """Before: the helper stayed in the hung call ("phase": "forwarding") after the launcher
    returned, for good: a process left behind by every job. Now the call fails after
    PLATFORM_WFLOGGER_CALL_TIMEOUT (3 s here, 30 by default), the helper is past its deadline and
    ends; the record waits for sync."""
    tracking_env.setenv("WFLOGGER_STANDIN_HANG", "1")
    tracking_env.setenv("PLATFORM_WFLOGGER_CALL_TIMEOUT", "3")
    tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "2")
    (tmp_path / "logs.py").write_text(LOGS)
    result = launch([sys.executable, "logs.py"], nproc=1, cwd=str(tmp_path), tracking="wflogger",
                    no_system_metrics=True, write=lambda text: None)
    assert result.ok and result.tracking.pending == 1  # waits in the spool for sync
    status_file = tmp_path / "platform_logs" / result.job_id / "tracking" / "helper.json"
    pid = json.loads(status_file.read_text())["pid"]
    try:
        wait_for(lambda: not alive(pid), timeout=120, what="the hung helper to stop")
    finally:  # a failing run must not leave it behind either
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    status = json.loads(status_file.read_text())
    assert status["phase"] == "done" and "did not return in 3s" in status["error"], status
    assert not (tmp_path / "wflogger_calls.jsonl").exists()  # nothing was delivered twice


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_call_timeout_that_cannot_work_is_refused_before_the_job(tracking_env, tmp_path,
                                                                     wflogger_standin, value):
    from platform_plugin.errors import ConfigError
    tracking_env.setenv("PLATFORM_WFLOGGER_CALL_TIMEOUT", value)
    with pytest.raises(ConfigError) as refused:
        launch([sys.executable, "-c", "pass"], nproc=1, cwd=str(tmp_path), tracking="wflogger",
               write=lambda text: None)
    assert refused.value.problems[0].code == "ENV_BAD_VALUE"
    assert not (tmp_path / "platform_logs").exists()  # nothing of the job was made
