"""The jobs of a log folder, as `platform-run jobs|attach|stop` and `%dist_jobs|attach|stop` see
them: read from each job's folder (job.json, the launcher's lock file, the tracking spool's
sink.json), never from a registry of our own that could disagree with it.

A job's state: `running` while its launcher lives and holds the job (job.json not ended, or its
folder lock still held: a restart between attempts, tracking's drain); once the launcher let go,
the result's status (`succeeded`, `failed` - a timeout and a hang are failures -,
`interrupted`); `lost` when the launcher is gone without writing a result (SIGKILLed, its
machine rebooted). "Gone" is decided from the launcher's pid AND its start time, both recorded
in job.json (`launcher`): a pid reused by another process is not the launcher, and a launcher
that is silent for hours is still running.
"""
from __future__ import annotations

import dataclasses
import datetime
import errno
import fcntl
import glob
import json
import os
import stat
import time
from typing import Any

from platform_plugin.errors import ConfigError
from platform_plugin.launcher.processes.result import JobResult
from platform_plugin.util.jobdirs import JOB_FILE, job_log_dir
from platform_plugin.util.procfs import alive, start_ticks

STATES = ("running", "succeeded", "failed", "interrupted", "lost")
ENDED_STATES = {"succeeded": "succeeded", "interrupted": "interrupted", "failed": "failed",
                "timeout": "failed", "hung": "failed"}
CANDIDATES_SHOWN = 5  # ids named by an unknown or ambiguous job's refusal


@dataclasses.dataclass
class JobRecord:
    """One job folder as it is now. `data`: job.json (None: not written yet, unreadable);
    `launcher_alive`: its launcher process runs (None: it runs on another host, unknown);
    `held`: its launcher holds the job folder's lock."""

    job_id: str
    job_dir: str
    data: dict | None
    launcher_alive: bool | None
    held: bool

    @property
    def state(self) -> str:
        data = self.data
        if data is None:
            return "running" if self.held else "lost"
        if self.launcher_alive is None:  # another host: what job.json says
            return ENDED_STATES.get(self._status(), "running") if data.get("state") == "ended" \
                else "running"
        if self.launcher_alive and (data.get("state") != "ended" or self.held):
            return "running"
        if data.get("state") == "ended" and data.get("result"):
            return ENDED_STATES.get(self._status(), "failed")
        return "lost"

    @property
    def running(self) -> bool:
        return self.state == "running"

    def _status(self) -> str:
        return str(((self.data or {}).get("result") or {}).get("status", ""))

    @property
    def launcher(self) -> dict:
        data = self.data or {}
        return data.get("launcher") or {"pid": data.get("supervisor_pid")}

    @property
    def plan(self) -> dict:
        return (self.data or {}).get("plan") or {}

    @property
    def name(self) -> str:
        return str(self.plan.get("job_name") or "")

    @property
    def ranks(self) -> int:
        return sum(1 for r in self.plan.get("ranks", []) if r.get("role", "worker") == "worker")

    @property
    def attempt(self) -> int:
        return int((self.data or {}).get("attempt") or 1)

    @property
    def servers(self) -> int:
        return int(self.plan.get("nnodes") or 1)

    @property
    def started(self) -> float | None:
        """Epoch seconds the ranks started (None: job.json not written yet)."""
        data = self.data or {}
        if data.get("started_epoch"):
            return float(data["started_epoch"])
        try:
            return time.mktime(time.strptime(str(data.get("started_at", ""))[:19],
                                             "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            return None

    @property
    def duration_s(self) -> float | None:
        result = (self.data or {}).get("result")
        if result and not self.running:
            return float(result.get("duration_s") or 0.0)
        started = self.started
        return None if started is None or not self.running else max(0.0, time.time() - started)

    @property
    def tracked(self) -> str:
        """Where the job's runs go: the sink and its store, or "none"."""
        for path in sorted(glob.glob(os.path.join(self.job_dir, "tracking*", "sink.json"))):
            sink = _json_file(path)
            if sink:
                uri = sink.get("tracking_uri") or ""
                return f"{sink.get('sink', '?')} {uri}".strip()
        return "none"

    def result(self) -> JobResult | None:
        """The job's result once it ended (None while it runs or when it was lost)."""
        data = (self.data or {}).get("result")
        if not data or self.running:
            return None
        try:
            return JobResult.from_dict(data)
        except (TypeError, ValueError, KeyError):  # a result of another version of the package
            return None

    def to_dict(self) -> dict[str, Any]:
        """What `platform-run jobs --json` prints for it: `started` in ISO 8601 with this
        machine's UTC offset (as a person and most JSON tools read a time), `started_epoch` in
        seconds for arithmetic (jq's `fromdateiso8601` reads no offset but `Z`)."""
        launcher = self.launcher
        started = self.started
        return {"id": self.job_id, "name": self.name, "state": self.state,
                "status": self._status() or None, "ranks": self.ranks, "attempt": self.attempt,
                "started": iso_time(started) if started is not None else None,
                "started_epoch": started, "duration_s": self.duration_s,
                "servers": self.servers, "tracked": self.tracked, "job_dir": self.job_dir,
                "launcher_pid": launcher.get("pid"), "how": launcher.get("how", "foreground")}


def iso_time(epoch_s: float) -> str:
    """`2026-12-05T03:21:38+00:00`: the local time, to the second, with its UTC offset."""
    return datetime.datetime.fromtimestamp(epoch_s).astimezone().isoformat(timespec="seconds")


def read_record(job_dir: str, known: dict | None = None) -> JobRecord:
    """The job in `job_dir` as it is now (never raises for a half-written or vanished folder).
    `known`: its job.json as read before, unchanged since (only the launcher is asked again)."""
    data = known if known is not None else _json_file(os.path.join(job_dir, JOB_FILE))
    if data is not None and not isinstance(data, dict):
        data = None
    job_id = str((data or {}).get("plan", {}).get("job_id") or os.path.basename(job_dir))
    return JobRecord(job_id=job_id, job_dir=job_dir, data=data,
                     launcher_alive=launcher_alive(data) if data is not None else False,
                     held=lock_held(job_dir))


def launcher_alive(data: dict) -> bool | None:
    """Does the launcher that wrote this job.json still run? Its pid must exist (not a zombie)
    with the start time job.json recorded. None: it runs on another host (a shared folder)."""
    ident = data.get("launcher") or {"pid": data.get("supervisor_pid")}
    host = ident.get("host")
    if host and host != os.uname().nodename:
        return None
    pid = ident.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    ticks = start_ticks(pid)
    if ticks is None or (ident.get("start_ticks") is not None and ticks != ident["start_ticks"]):
        return False
    return alive(pid)


def lock_held(job_dir: str) -> bool:
    """A launcher holds the job folder (launcher/processes/spawn.JobDirLock: an flock the kernel
    drops when the launcher dies): asked with a shared lock taken and dropped at once."""
    for path in glob.glob(os.path.join(job_dir, ".launcher-*.lock")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
        finally:
            os.close(fd)
    return False


def list_jobs(log_dir: str | None = None) -> list[JobRecord]:
    """Every job folder of the log folder (`--log-dir`, else PLATFORM_LOG_DIR, else
    ./platform_logs), newest first."""
    base = job_log_dir(log_dir)
    try:
        names = os.listdir(base)
    except OSError:
        return []
    records = []
    for name in names:
        folder = os.path.join(base, name)
        if name.startswith(".") or name == "cells" or not os.path.isdir(folder):
            continue
        if not (os.path.exists(os.path.join(folder, JOB_FILE))
                or glob.glob(os.path.join(folder, ".launcher-*.lock"))):
            continue  # not a job folder (a `compare --plot` folder, ...)
        records.append(read_record(folder))
    return sorted(records, key=_newest_first)


def _newest_first(record: JobRecord) -> tuple:
    started = record.started
    if started is None:  # starting: its folder's time
        try:
            started = os.stat(record.job_dir).st_mtime
        except OSError:
            started = 0.0
    return (-started, record.job_id)


def resolve(job: str | None, log_dir: str | None = None, *, running: bool = False) -> JobRecord:
    """The job a command names: a job folder, an id, or the unique id that starts with or
    contains `job`; None: the newest job (`running`: the newest running one). Unknown or
    ambiguous: a ConfigError of one line naming the candidates (JOB_UNKNOWN, JOB_AMBIGUOUS)."""
    if job and (os.sep in job or job in (".", "..")) and os.path.isdir(job):
        return read_record(os.path.abspath(job))
    records = list_jobs(log_dir)
    where = job_log_dir(log_dir)
    if job is None:
        found = [r for r in records if r.running] if running else records
        if not found:
            what = "running job" if running else "job"
            raise ConfigError(f"no {what} in {where}" + (
                f" (the latest: {_named(records)})" if records else "") + "; give --log-dir if "
                "the job wrote elsewhere", code="JOB_UNKNOWN")
        return found[0]
    exact = [r for r in records if r.job_id == job]
    if exact:
        return exact[0]
    matches = [r for r in records if r.job_id.startswith(job)] or \
        [r for r in records if job in r.job_id]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError(f"job {job!r} is ambiguous in {where}: it names {_named(matches)}; "
                          "give more of the id", code="JOB_AMBIGUOUS")
    raise ConfigError(f"no job {job!r} in {where}" + (
        f"; the newest: {_named(records)}" if records else " (no job there)"),
        code="JOB_UNKNOWN")


def _named(records: list[JobRecord]) -> str:
    shown = ", ".join(f"{r.job_id} ({r.state})" for r in records[:CANDIDATES_SHOWN])
    more = len(records) - CANDIDATES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _json_file(path: str) -> Any:
    """A JSON file, or None when it is missing, half-written, unreadable or not a regular file
    (a FIFO planted there must not hang a listing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return json.loads(fh.read(16 << 20) or b"null")
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
