"""The rank-table route's job id (the table's first server derives it and sends it to the
others with the job link's `go`: servers/identity.py).

The servers of a multi-server full run share two things the platform made for this job: the
rank table (the same file content on every server) and the job's own variables. The id is:

1. `--job-id` / `PLATFORM_JOB_ID` when set (by hand, or by a platform that provides one);
2. else a platform job variable (`PLATFORM_JOB_VARIABLES`, first one set wins) mixed with the
   rank table's content: `<job name>-<its hash>`;
3. else the rank table's content and its modification time (whole seconds): the platform writes
   the table once per job, so the next job - even on the same servers, with the same devices -
   has a new mtime and a new id. Only the first server reads it: the others' copies of the
   table need not keep its mtime.
"""
from __future__ import annotations

import os
import time

# Variables a scheduler sets once per job and identically on every server of it (ModelArts,
# Volcano, BytePlus MLP naming). Checked in this order after PLATFORM_JOB_ID.
PLATFORM_JOB_VARIABLES = ("MA_JOB_ID", "MA_VJ_NAME", "VC_JOB_NAME", "BATCH_JOB_ID", "MLP_TASK_ID")


def rank_table_job_id(job_name: str, table_path: str, environ: dict) -> str:
    """The same on every server of one job, different for the next job (see the module doc)."""
    import hashlib  # (OpenSSL's start: only on the rank-table route)

    with open(table_path, "rb") as fh:
        content = fh.read()
    digest = hashlib.sha256(content)
    variable = next((v for v in PLATFORM_JOB_VARIABLES if environ.get(v)), None)
    if variable:
        digest.update(f"\0{variable}={environ[variable]}".encode())
        return f"{job_name}-{digest.hexdigest()[:12]}"
    mtime = int(os.stat(table_path).st_mtime)
    digest.update(f"\0mtime={mtime}".encode())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(mtime))
    return f"{job_name}-{stamp}-{digest.hexdigest()[:8]}"

