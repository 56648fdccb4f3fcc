"""`<job_dir>/job.json`: the plan when the ranks start (with their pids), the result at the end.

`platform-run doctor` and people read it after the fact, so it is rewritten atomically (a
reader never sees half a file) and holds only the launcher's own variables, never the full env.

A full disk must not cost the result: the first write leaves `RESERVE` bytes of trailing
blanks (valid JSON) so that when the atomic rewrite finds no space, the result is written
over the file's own blocks instead (compacted if it must). Writing never raises: a failure is
kept in `error` and reported by the launcher.
"""
from __future__ import annotations

import json
import os
import time
from typing import Iterator

from platform_plugin.launcher.planning.plan import LaunchPlan
from platform_plugin.launcher.processes.result import JobResult
from platform_plugin.launcher.processes.supervisor import Supervisor
from platform_plugin.util.jobdirs import JOB_FILE, MAX_JOB_FILE_BYTES
from platform_plugin.util.procfs import start_ticks
from platform_plugin.util.regular_file import read_json
from platform_plugin.variables import (PLATFORM_ATTEMPT_NUMBER, PLATFORM_CHECKPOINT_DIR,
                                       PLATFORM_JOB_DIR, PLATFORM_JOB_NAME, PLATFORM_RESUME_STEP,
                                       PLATFORM_SERVER_ID)

RESERVE = 64 * 1024  # room for the result when the disk is full by the end of the job
# Variables the launcher owns; job.json records these (never the whole env: it may hold secrets).
RANK_VARIABLES = ("RANK_ID", "DEVICE_ID", "RANK_SIZE", "LOCAL_RANK", "JOB_ID",
                  PLATFORM_JOB_NAME.name, PLATFORM_JOB_DIR.name, PLATFORM_SERVER_ID.name,
                  PLATFORM_ATTEMPT_NUMBER.name, PLATFORM_CHECKPOINT_DIR.name, PLATFORM_RESUME_STEP.name,
                  "PYTHONUNBUFFERED")


# how this process's launches run: "foreground" (a cell, a terminal), "background" (its own
# process, tied to the kernel that started it) or "detached" (its own session, survives it).
# Set by the background job's process (launcher/jobs/child.py) for itself: never an
# environment variable, which the ranks (and a launcher a rank starts) would inherit
_LAUNCHED_AS = ["foreground"]


def launched_as(how: str) -> None:
    _LAUNCHED_AS[0] = how


def launcher_identity() -> dict:
    """This launcher as `platform-run jobs|stop|attach` tell it from a later process: pid AND
    start time (clock ticks after boot: a reused pid has another), host, user, how it runs."""
    pid = os.getpid()
    return {"pid": pid, "start_ticks": start_ticks(pid), "uid": os.getuid(),
            "host": os.uname().nodename, "how": _LAUNCHED_AS[0]}


def plan_summary(plan: LaunchPlan) -> dict:
    """What job.json records at the start (the doctor reads it)."""
    return {
        "job_id": plan.job_id, "job_name": plan.job_name, "job_dir": plan.job_dir,
        "backend": plan.backend, "backend_reason": plan.backend_reason,
        "world_size": plan.world_size, "node_rank": plan.node_rank, "nnodes": plan.nnodes,
        "server_id": plan.server_id, "cache_dir": plan.cache_dir, "command": list(plan.command),
        "master_addr": plan.master_addr, "master_port": plan.master_port,
        "attempt": plan.attempt, "checkpoint_dir": plan.checkpoint_dir,
        "resume_step": plan.resume_step,
        "ranks": [{"name": r.name, "role": r.role, "rank_id": r.rank_id,
                   "local_rank": r.local_rank, "device_id": r.device_id, "argv": list(r.argv),
                   "cwd": r.cwd, "log_path": r.log_path,
                   "env": {k: v for k, v in r.env.items()
                           if k in RANK_VARIABLES or k.startswith(("MS_", "MASTER_", "RANK"))
                           or k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                    "MS_COMPILER_CACHE_PATH", "ASCEND_PROCESS_LOG_PATH")}}
                  for r in plan.ranks],
    }


class JobFile:
    """A Supervisor observer (`started`, `ended`) plus `record(result)`, the launcher's final
    write once tracking reported. `early_end`: also write when the ranks ended (a tracked job:
    the drain may take its deadline before `record`); an untracked job writes twice in all."""

    def __init__(self, plan: LaunchPlan, attempts: list[dict] | None = None, *,
                 early_end: bool = True):
        self.plan = plan
        self.early_end = early_end
        self.path = os.path.join(plan.job_dir, JOB_FILE)
        self.error = ""  # why the last write failed, if it did
        self.data = {"schema": 1, "state": "starting", "supervisor_pid": os.getpid(),
                     "launcher": launcher_identity(),
                     "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                     "started_epoch": round(time.time(), 3), "plan": plan_summary(plan),
                     "pids": {}, "result": None,
                     # --max-restarts: the root-cause table of every earlier failed attempt
                     "attempt": plan.attempt, "failed_attempts": list(attempts or [])}

    def started(self, supervisor: Supervisor) -> None:
        self.data["state"] = "running"
        self.data["pids"] = {p.spec.name: p.popen.pid for p in supervisor.procs}
        self._write(reserve=True)

    def ended(self, result: JobResult) -> None:
        if self.early_end:
            self.record(result)

    def record(self, result: JobResult) -> None:
        self.data["state"] = "ended"
        self.data["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.data["result"] = result.to_dict()
        self._write()

    def _write(self, *, reserve: bool = False) -> bool:
        text = _document(self.data)
        tmp = f"{self.path}.tmp"
        try:
            os.makedirs(self.plan.job_dir, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text + (" " * RESERVE + "\n" if reserve else ""))
            os.replace(tmp, self.path)
            self.error = ""
            return True
        except OSError as exc:
            self.error = f"{exc.strerror or exc} writing {self.path}"
        _remove(tmp)  # frees the blocks the failed copy took
        written, note = overwrite_in_place(self.path, self.data)
        self.error += note
        return written


def _document(value: object, depth: int = 0) -> str:
    """The document, readable and quick to make: the top two levels one item a line (the
    plan's and the result's fields, one rank or failure a line), deeper values as compact JSON
    on that line. `indent=` would run json's pure-Python encoder, several times slower than the
    C one used here."""
    if depth >= 2 or not value or not isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(str(k))}: {_document(v, depth + 1)}" for k, v in value.items()]
    else:
        items = [pad + _document(v, depth + 1) for v in value]
    ends = "{}" if isinstance(value, dict) else "[]"
    text = ends[0] + "\n" + ",\n".join(items) + "\n" + "  " * depth + ends[1]
    return text + "\n" if depth == 0 else text


def overwrite_in_place(path: str, data: dict) -> tuple[bool, str]:
    """A full disk: write over the existing file's blocks (no new space needed while it fits;
    the first write reserved RESERVE bytes for it): (written, what to add to the error)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return False, ""
    for text in _smaller_forms(data):
        if len(text.encode()) > size:
            continue
        try:
            with open(path, "r+b") as fh:
                raw = text.encode()
                fh.write(raw + b" " * (size - len(raw)))  # same length: no new blocks
            return True, " (written in place, over the space reserved at the start)"
        except OSError:
            return False, ""
    return False, ""


def _smaller_forms(data: dict) -> Iterator[str]:
    """The document, then more compact versions of it (the last lines of each failed rank go
    last: they are also in the rank logs)."""
    yield _document(data)
    yield json.dumps(data, separators=(",", ":"), default=str) + "\n"
    result = data.get("result")
    if isinstance(result, dict):
        trimmed = dict(result, failures=[dict(f, last_lines=[]) for f in result.get("failures", [])],
                       root_cause=(dict(result["root_cause"], last_lines=[])
                                   if result.get("root_cause") else None))
        yield json.dumps(dict(data, result=trimmed), separators=(",", ":"), default=str) + "\n"


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def read(job_dir: str) -> dict:
    """job.json as util/regular_file.py reads what others can write (raises OSError, ValueError)."""
    return read_json(os.path.join(job_dir, JOB_FILE), MAX_JOB_FILE_BYTES, within=job_dir)
