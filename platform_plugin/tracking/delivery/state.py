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
from contextlib import contextmanager, suppress

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeVar
    F = TypeVar("F", bound="_SpoolFile")

# Plain classes (util/record.py), not dataclasses, and str paths, not pathlib: the launcher
# imports this module for every tracked job before its ranks start (each dataclass costs ~1.5 ms
# to define, pathlib and its imports ~5 ms). A `spool_dir` argument is a str or a Path.
SINK_FILE = "sink.json"


def write_json_atomic(path, data: dict) -> None:
    """One line of JSON (C encoder; the offsets are rewritten after every batch), atomically."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, sort_keys=True))
        os.replace(tmp, path)
    except BaseException:  # e.g. a full disk: no empty .tmp left in the job folder per try
        with suppress(OSError):
            os.unlink(tmp)
        raise


class DamagedStateFile(ConfigError, ValueError):
    """A state file that is not what this module writes (edited by hand, truncated by a full
    disk or a copy): `sync`/`compare` refuse with the file's name instead of a traceback. A
    ValueError too, as json's error was before."""

    def __init__(self, path, why: str) -> None:
        super().__init__([Problem("TRACKING_STATE_DAMAGED", f"damaged ({why}): this job's "
                                  "tracking state cannot be read; its spool (*.jsonl) is left "
                                  "as it is", os.fspath(path))])


# state files are a few hundred bytes (sink.json a few KiB of job tags): a bound, not a limit
MAX_STATE_BYTES = 16 << 20


def read_json(path) -> dict | None:
    """The file's JSON object; None when there is no file. Opened without blocking and read with
    a bound: a FIFO in its place hung `clean` and `sync` for good."""
    from platform_plugin.util.regular_file import FileTooLarge, NotRegularFile, read_regular_file
    try:
        raw = read_regular_file(os.fspath(path), MAX_STATE_BYTES)
    except FileNotFoundError:
        return None
    except (NotRegularFile, FileTooLarge) as exc:
        raise DamagedStateFile(path, str(exc)) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:  # also bytes that are not UTF-8
        raise DamagedStateFile(path, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DamagedStateFile(path, f"a JSON {type(data).__name__}, not an object")
    return data


class _State(Record):
    """A state file's fields (`__slots__`), saved as a JSON object (`as_dict`) and loaded back
    ignoring names it does not know (a file written by another version)."""
    __slots__ = ()

    @classmethod
    def _from(cls, data: dict, path=""):
        try:
            return cls(**{k: v for k, v in data.items() if k in cls.__slots__})
        except TypeError as exc:  # a required field missing
            raise DamagedStateFile(path, str(exc)) from None


class _SpoolFile(_State):
    """A state file a spool folder has one of, named FILE."""
    __slots__ = ()
    FILE = ""

    @classmethod
    def load(cls: type[F], spool_dir) -> F | None:
        """None when there is no such file."""
        path = os.path.join(spool_dir, cls.FILE)
        data = read_json(path)
        return None if data is None else cls._from(data, path)

    def save(self, spool_dir) -> None:
        write_json_atomic(os.path.join(spool_dir, self.FILE), self.as_dict())


class StreamState(_State):
    __slots__ = ("offset", "delivered", "skipped", "rejected", "refused", "quarantined", "run_id",
                 "last_error")

    def __init__(self, offset: int = 0, delivered: int = 0, skipped: int = 0, rejected: int = 0,
                 refused: int = 0, quarantined: int = 0, run_id: str | None = None,
                 last_error: str = ""):
        self.offset = offset  # bytes of the spool delivered (or skipped as bad lines)
        self.delivered = delivered
        self.skipped = skipped  # complete lines that were not valid records
        self.rejected = rejected  # valid records the sink refused for good (a param changing value)
        self.refused = refused  # records the tracker refused in the rank (over MLflow's size limits)
        self.quarantined = quarantined  # lines too large to deliver, moved to <stream>.jsonl.quarantine
        self.run_id = run_id  # MLflow run of this stream (layout "runs")
        self.last_error = last_error

    @staticmethod
    def path_for(spool_dir, stream: str) -> str:
        return os.path.join(spool_dir, f"{stream}.state.json")

    @classmethod
    def load(cls, spool_dir, stream: str) -> "StreamState":
        path = cls.path_for(spool_dir, stream)
        return cls._from(read_json(path) or {}, path)

    def save(self, spool_dir, stream: str) -> None:
        write_json_atomic(self.path_for(spool_dir, stream), self.as_dict())


class SinkConfig(_SpoolFile):
    FILE = SINK_FILE
    __slots__ = ("sink", "layout", "tracking_uri", "experiment_name", "experiment_id",
                 "parent_run_id", "job", "ranks", "final_status", "ended")

    def __init__(self, sink: str, layout: str = "runs", tracking_uri: str | None = None,
                 experiment_name: str | None = None, experiment_id: str | None = None,
                 parent_run_id: str | None = None, job: dict | None = None,
                 ranks: dict | None = None, final_status: str | None = None, ended: bool = False):
        self.sink = sink  # registry key: "mlflow" | "wflogger"
        self.layout = layout  # "runs" | "flat"
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id  # the job's run (None for a rank logging without launcher)
        self.job = {} if job is None else job  # job_id, job_name, tags for the parent run
        self.ranks = {} if ranks is None else ranks  # label -> {device_id, server_id, host, log_path}
        self.final_status = final_status  # set by finish(): "FINISHED" | "FAILED"
        self.ended = ended  # runs terminated in the sink


END_FILE = "end.json"
HELPER_FILE = "helper.json"
STOPPING_FILE = "stopping.json"  # this server's job stops: the helper tags the parent run
STOP_REQUEST_FILE = "stop_request.json"  # the helper saw another server stop the job


class JobEnd(_SpoolFile):
    """The launcher's word that the ranks have ended (end.json)."""
    FILE = END_FILE
    __slots__ = ("status", "deadline", "reason", "last", "gone")

    def __init__(self, status: str, deadline: float, reason: str = "", last: bool = True,
                 gone: list | None = None):
        self.status = status  # "FINISHED" | "FAILED"
        self.deadline = deadline  # epoch seconds: deliver until then, leave the rest to `sync`
        self.reason = reason  # why it failed (recorded on a multi-server job's parent run)
        self.last = last  # False: --max-restarts starts another attempt, the parent stays open
        # servers whose launcher vanished (the job link saw it): their end is reported for them
        self.gone = [str(s) for s in gone or ()]

    @classmethod
    def _from(cls, data: dict, path=""):
        """Typed as the launcher writes it: helpers and `sync` compare the deadline with time."""
        try:
            return cls(str(data["status"]), float(data["deadline"]), str(data.get("reason", "")),
                       bool(data.get("last", True)), list(data.get("gone") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise DamagedStateFile(path, f"{type(exc).__name__}: {exc}") from None


class HelperStatus(_SpoolFile):
    """The forwarding helper's progress (helper.json), read by the launcher and by tests."""
    FILE = HELPER_FILE
    __slots__ = ("pid", "phase", "error", "runs_ended")

    def __init__(self, pid: int = 0, phase: str = "starting", error: str = "",
                 runs_ended: bool = False):
        self.pid = pid
        self.phase = phase  # starting | forwarding | ending | done
        self.error = error  # why the sink could not be set up or reached, if it could not
        self.runs_ended = runs_ended


LOCK_POLL_S = 0.1


@contextmanager
def stream_lock(spool_dir, stream: str, *, blocking: bool, timeout: float | None = None):
    """Yields True when this process holds the stream, False when another one does. Blocking
    waits for it, at most `timeout` seconds when given: a forwarder stuck in MLflow's own HTTP
    retries (minutes, when its server died mid-request) holds its stream that long."""
    fd = os.open(os.path.join(spool_dir, f"{stream}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
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
