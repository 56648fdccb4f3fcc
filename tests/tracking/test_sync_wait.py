"""`platform-run sync --wait inf`: waits without limit for a sink that is down (decided: a
documented "until delivered", not a refusal - a sync left running in the background until the
server is back is a real use), and SIGTERM or Ctrl-C end it like any command: exit 130, one
line, nothing lost. Before: SIGTERM killed it silently (exit -15)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from platform_plugin.launcher import launch
from tests.helpers import terminal_sigint
from tests.tracking.helpers import hold_port

pytestmark = pytest.mark.slow
CLI = str(Path(sys.executable).with_name("platform-run"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sync_wait_inf_retries_a_dead_sink_until_stopped_then_ends_quietly(tracking_env, tmp_path,
                                                                         signum):
    port = hold_port()  # nobody listens: refused, as a dead server
    try:
        tracking_env.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port.getsockname()[1]}")
        tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "1")
        result = launch([sys.executable, "-c", "from platform_plugin import tracking\n"
                         "tracking.get_tracker().log_metric('loss', 1.0)"], nproc=1,
                        cwd=str(tmp_path), no_system_metrics=True, write=lambda text: None)
        assert result.ok and result.tracking.pending == 1
        sync = subprocess.Popen([CLI, "sync", result.job_id, "--wait", "inf"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=terminal_sigint)  # Ctrl-C as a terminal's
        try:
            time.sleep(3)  # several attempts (0.5 s, 1 s, 2 s pauses): it is still retrying
            assert sync.poll() is None
            sync.send_signal(signum)
            out, err = sync.communicate(timeout=60)
        finally:
            if sync.poll() is None:
                sync.kill()
                sync.wait()
        assert sync.returncode == 130, out + err
        assert "sync: interrupted" in err and "Traceback" not in err, err
        again = subprocess.run([CLI, "sync", result.job_id, "--wait", "0"], capture_output=True,
                               text=True, timeout=120)
        assert again.returncode == 1 and "pending 1" in again.stdout, again.stdout + again.stderr
    finally:
        port.close()
