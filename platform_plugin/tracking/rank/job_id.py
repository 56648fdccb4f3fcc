"""The one rule for job ids, `<job_name>-<YYYYmmdd-HHMMSS>-<4 hex>` (local time): the launcher
names its jobs with it (launcher/planning/plan.py), and a process run without the launcher names its own
job the same way (identity.py). Here, on tracking's rank side (the stdlib only), in a module of
its own: the launcher imports it before the ranks start, without the rank's identity.
"""
from __future__ import annotations

import os
import time


def new_job_id(job_name: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{job_name}-{stamp}-{os.urandom(2).hex()}"
