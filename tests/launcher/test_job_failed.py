"""The one line a failed job ends its cell with (JobFailed), without stutter."""
from __future__ import annotations

from platform_plugin.launcher.processes.result import JobFailed, JobResult, JobStatus, RankFailure


def test_an_interrupted_job_says_interrupted_once():
    """Seen in JupyterLab after the stop button: "job x interrupted: interrupted (Ctrl-C, ...)"."""
    result = JobResult("x", "n", "/logs/x", "plain", JobStatus.INTERRUPTED, False, 2.0,
                       {"0": -15}, reason="interrupted: Ctrl-C, a kernel interrupt or SIGTERM "
                       "to the launcher")
    assert str(JobFailed(result)) == ("job x interrupted: Ctrl-C, a kernel interrupt or SIGTERM "
                                      "to the launcher (logs: /logs/x)")
    result = JobResult("x", "n", "/logs/x", "plain", JobStatus.TIMEOUT, False, 2.0, {"0": -15},
                       reason="no end after --timeout 5")
    assert str(JobFailed(result)) == "job x timeout: no end after --timeout 5 (logs: /logs/x)"
    cause = RankFailure("1", 1, 1, "h", 42, 3, None, 1.5, root_cause=True)
    result = JobResult("x", "n", "/logs/x", "plain", JobStatus.FAILED, False, 2.0,
                       {"0": 0, "1": 3}, failures=[cause], root_cause=cause)
    assert str(JobFailed(result)) == "job x failed: rank 1 exit 3 (logs: /logs/x)"
