"""How a compared job ended, said above its table: succeeded; failed (which rank, which exit);
interrupted; timed out; hung; resumed at attempt K from step S; still running. And the ranks
that did not finish, marked in the table: a rank's curve that stops early is otherwise read as
a slow rank, or as the whole story.

Read from the job folder's job.json (the launcher's record, launcher/processes/jobfile.py) -
plain JSON, nothing of the launcher imported; a job with no folder here (it ran on another
server) from its parent run's status in the tracking store.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from platform_plugin.util.procfs import alive

WORDS = {"succeeded": "succeeded", "failed": "failed", "timeout": "timed out", "hung": "hung",
         "interrupted": "interrupted"}
RUN_STATUS_WORDS = {"FINISHED": "succeeded", "FAILED": "failed", "KILLED": "interrupted",
                    "RUNNING": "still running (or its launcher ended without saying how)"}


@dataclass
class JobEnding:
    headline: str  # "ended: failed: rank 1 exit 3", ... ("" when nothing says)
    unfinished: dict[str, str] = field(default_factory=dict)  # rank label -> how it ended

    def lines(self) -> list[str]:
        """What goes above the table."""
        lines = [self.headline] if self.headline else []
        if self.unfinished:
            lines.append("ranks marked `did not finish` stopped before the job's end: their "
                         "curves end early, not slow")
        return lines


def from_job_folder(job_dir: Path | None) -> JobEnding | None:
    """The ending job.json records; None when there is no readable job.json."""
    if job_dir is None:
        return None
    try:
        with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as stream:
            data = json.load(stream)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    result = data.get("result")
    if not isinstance(result, dict):
        pid = data.get("supervisor_pid")
        if isinstance(pid, int) and alive(pid):
            return JobEnding("ended: not yet, the job is still running (the table shows it so far)")
        return JobEnding("ended: not recorded (its launcher was killed before it could say how)")
    status = str(result.get("status", ""))
    what = WORDS.get(status, status or "?")
    cause = result.get("root_cause") or {}
    if status == "failed" and cause:
        what += f": {_label(cause)} {_how(cause)}"
    elif status != "succeeded" and result.get("reason"):
        what += f" ({result['reason']})"
    resumed = [a["resumed"] for a in data.get("failed_attempts") or []
               if isinstance(a, dict) and isinstance(a.get("resumed"), dict)]
    if resumed:
        last = resumed[-1]
        if last.get("step") is None:  # the script may have resumed from a snapshot of its own
            what += f"; restarted at attempt {last.get('attempt')} (no platform checkpoint)"
        else:
            what += f"; resumed at attempt {last.get('attempt')} from step {last['step']}"
    unfinished = {}
    for failure in result.get("failures") or []:
        if isinstance(failure, dict) and failure.get("rank_id") is not None:
            unfinished[str(failure["rank_id"])] = _how(failure)
    return JobEnding(f"ended: {what}", unfinished)


def from_run_status(status: str | None) -> JobEnding | None:
    """The ending the parent run's MLflow status says (a job that ran on another server)."""
    if not status:
        return None
    return JobEnding(f"ended: {RUN_STATUS_WORDS.get(status, status.lower())} (its MLflow run's "
                     "status; the job folder is on another server)")


def _label(failure: dict) -> str:
    name = str(failure.get("name", "?"))
    return f"rank {name}" if name.isdigit() else name


def _how(failure: dict) -> str:
    if failure.get("signal_name"):
        return str(failure["signal_name"])
    code = failure.get("exitcode")
    return "still running when stopped" if code is None else f"exit {code}"
