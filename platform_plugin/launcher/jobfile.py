"""`<job_dir>/job.json`: the plan when the ranks start (with their pids), the result at the end.

`platform-run doctor` and people read it after the fact, so it is rewritten atomically (a
reader never sees half a file) and holds only the launcher's own variables, never the full env.
"""
from __future__ import annotations

import json
import os
import time

from platform_plugin.launcher.plan import LaunchPlan


class JobFile:
    def __init__(self, plan: LaunchPlan):
        self.plan = plan
        self.path = os.path.join(plan.job_dir, "job.json")
        self.data = {"schema": 1, "state": "starting", "supervisor_pid": os.getpid(),
                     "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "plan": plan.summary(),
                     "pids": {}, "result": None}

    def started(self, supervisor) -> None:
        self.data["state"] = "running"
        self.data["pids"] = {p.spec.name: p.popen.pid for p in supervisor.procs}
        self._write()

    def ended(self, result) -> None:
        self.data["state"] = "ended"
        self.data["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.data["result"] = result.to_dict()
        self._write()

    def _write(self) -> None:
        os.makedirs(self.plan.job_dir, exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.data, fh, indent=2, default=str)
        os.replace(tmp, self.path)


def read(job_dir: str) -> dict:
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as fh:
        return json.load(fh)
