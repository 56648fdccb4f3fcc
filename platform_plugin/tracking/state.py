"""Small JSON state files next to the spools, replaced atomically (write + rename), so a crash
leaves either the old or the new content, never a torn file.

- `<stream>.state.json`: how far the stream was delivered (byte offset and counts) and the run
  its points go to. The offset is written right after each accepted batch.
- `sink.json`: the job's sink (kind, tracking URI, experiment, parent run, layout, job tags
  and the final status), so `platform-run sync` can finish the job without the launcher.
- `end.json`: written by the launcher when the ranks have ended: the job's final status and
  the drain deadline (epoch seconds). The forwarding helper stops delivering at the deadline;
  `platform-run sync` ends the runs with this status once everything is delivered.
- `helper.json`: what the forwarding helper process is doing (pid, phase, last error).
- `<stream>.lock`: an flock held while a stream is being forwarded, so a `sync` and a live
  forwarder never send the same lines twice.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

SINK_FILE = "sink.json"


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


@dataclass
class StreamState:
    offset: int = 0  # bytes of the spool delivered (or skipped as bad lines)
    delivered: int = 0
    skipped: int = 0  # complete lines that were not valid records
    rejected: int = 0  # valid records the sink refused for good (e.g. a param changing value)
    refused: int = 0  # records the tracker refused in the rank (over MLflow's size limits)
    quarantined: int = 0  # lines too large to deliver, moved to <stream>.jsonl.quarantine
    run_id: str | None = None  # MLflow run of this stream (layout "runs")
    last_error: str = ""

    @staticmethod
    def path_for(spool_dir: Path, stream: str) -> Path:
        return spool_dir / f"{stream}.state.json"

    @classmethod
    def load(cls, spool_dir: Path, stream: str) -> "StreamState":
        data = read_json(cls.path_for(spool_dir, stream)) or {}
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, spool_dir: Path, stream: str) -> None:
        write_json_atomic(self.path_for(spool_dir, stream), asdict(self))


@dataclass
class SinkConfig:
    sink: str  # registry key: "mlflow" | "wflogger"
    layout: str = "runs"  # "runs" | "flat"
    tracking_uri: str | None = None
    experiment_name: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None  # the job's run (None for a rank logging without launcher)
    job: dict = field(default_factory=dict)  # job_id, job_name, tags for the parent run
    ranks: dict = field(default_factory=dict)  # label -> {device_id, server_id, host, log_path}
    final_status: str | None = None  # set by finish(): "FINISHED" | "FAILED"
    ended: bool = False  # runs terminated in the sink

    @classmethod
    def load(cls, spool_dir: Path) -> "SinkConfig | None":
        data = read_json(spool_dir / SINK_FILE)
        if data is None:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, spool_dir: Path) -> None:
        write_json_atomic(spool_dir / SINK_FILE, asdict(self))


END_FILE = "end.json"
HELPER_FILE = "helper.json"
STOPPING_FILE = "stopping.json"  # this server's job stops: the helper tags the parent run
STOP_REQUEST_FILE = "stop_request.json"  # the helper saw another server stop the job


@dataclass
class JobEnd:
    """The launcher's word that the ranks have ended (end.json)."""
    status: str  # "FINISHED" | "FAILED"
    deadline: float  # epoch seconds: deliver until then, leave the rest to `sync`
    reason: str = ""  # why it failed (recorded on a multi-server job's parent run)
    last: bool = True  # False: --max-restarts starts another attempt, the parent stays open

    @classmethod
    def load(cls, spool_dir: Path) -> "JobEnd | None":
        data = read_json(spool_dir / END_FILE)
        return None if data is None else cls(str(data["status"]), float(data["deadline"]),
                                             str(data.get("reason", "")),
                                             bool(data.get("last", True)))

    def save(self, spool_dir: Path) -> None:
        write_json_atomic(spool_dir / END_FILE, asdict(self))


@dataclass
class HelperStatus:
    """The forwarding helper's progress (helper.json), read by the launcher and by tests."""
    pid: int = 0
    phase: str = "starting"  # starting | forwarding | ending | done
    error: str = ""  # why the sink could not be set up or reached, if it could not
    runs_ended: bool = False

    @classmethod
    def load(cls, spool_dir: Path) -> "HelperStatus | None":
        data = read_json(spool_dir / HELPER_FILE)
        if data is None:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, spool_dir: Path) -> None:
        write_json_atomic(spool_dir / HELPER_FILE, asdict(self))


LOCK_POLL_S = 0.1


@contextmanager
def stream_lock(spool_dir: Path, stream: str, *, blocking: bool, timeout: float | None = None):
    """Yields True when this process holds the stream, False when another one does. Blocking
    waits for it, at most `timeout` seconds when given: a forwarder stuck in MLflow's own HTTP
    retries (minutes, when its server died mid-request) holds its stream that long."""
    fd = os.open(spool_dir / f"{stream}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        yield _acquire(fd, blocking, timeout)
    finally:
        os.close(fd)  # closing releases the lock


def _acquire(fd: int, blocking: bool, timeout: float | None) -> bool:
    if blocking and timeout is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + (timeout or 0.0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not blocking or time.monotonic() >= deadline:
                return False
            time.sleep(LOCK_POLL_S)
