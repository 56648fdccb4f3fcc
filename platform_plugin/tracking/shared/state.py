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
  forwarder never send the same lines twice; `sync.lock`: one `sync` of a job at a time.
- `aggregates.json`: the per-step aggregates sent to the job's run (aggregates.py).
Beside them (appended, not replaced): `<stream>.jsonl.quarantine` (lines too large to deliver)
and `<stream>.jsonl.rejected` (records the store refused for good, with its reason).
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import time
from contextlib import contextmanager, suppress
from typing import Any, ClassVar, Iterator, TypeVar

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.regular_file import read_json as untrusted_json
from platform_plugin.util.regular_file import reason

# A `spool_dir` argument is a str or a Path.
SINK_FILE = "sink.json"


def write_json_atomic(path: str | os.PathLike[str], data: dict) -> None:
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
    ValueError too, as json's own error is."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__([Problem("TRACKING_STATE_DAMAGED", f"damaged ({why}): this job's "
                                  "tracking state cannot be read; its spool (*.jsonl) is left "
                                  "as it is", os.fspath(path))])


# state files are a few hundred bytes (sink.json a few KiB of job tags): a bound, not a limit
MAX_STATE_BYTES = 16 << 20


def read_json(path: str | os.PathLike[str]) -> dict | None:
    """The file's JSON object; None when there is no file. Read as util/regular_file.py reads
    what others can write: a FIFO in its place hung `clean` and `sync` for good, a link is not
    followed out of the spool folder, the size and the nesting are bounded."""
    path = os.fspath(path)
    try:
        data = untrusted_json(path, MAX_STATE_BYTES, within=os.path.dirname(os.path.abspath(path)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # Refused, not UTF-8, not JSON, too deep
        raise DamagedStateFile(path, reason(exc)) from None
    if not isinstance(data, dict):
        raise DamagedStateFile(path, f"a JSON {type(data).__name__}, not an object")
    return data


S = TypeVar("S", bound="_State")
F = TypeVar("F", bound="_SpoolFile")


class _State:
    """The base of a state file's dataclass, saved as a JSON object (its fields) and loaded back
    ignoring names it does not know (a file written by another version)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # (each subclass is a dataclass)

    @classmethod
    def _from(cls: type[S], data: dict, path: str | os.PathLike[str] = "") -> S:
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:  # a required field missing
            raise DamagedStateFile(path, str(exc)) from None


class _SpoolFile(_State):
    """A state file a spool folder has one of, named FILE."""
    FILE: ClassVar[str] = ""

    @classmethod
    def load(cls: type[F], spool_dir: str | os.PathLike[str]) -> F | None:
        """None when there is no such file."""
        path = os.path.join(spool_dir, cls.FILE)
        data = read_json(path)
        return None if data is None else cls._from(data, path)

    def save(self, spool_dir: str | os.PathLike[str]) -> None:
        write_json_atomic(os.path.join(spool_dir, self.FILE), dataclasses.asdict(self))


@dataclasses.dataclass
class StreamState(_State):
    offset: int = 0  # bytes of the spool delivered (or skipped as bad lines)
    delivered: int = 0
    skipped: int = 0  # complete lines that were not valid records
    rejected: int = 0  # valid records the sink refused for good (a param changing value)
    refused: int = 0  # records the tracker refused in the rank (over MLflow's size limits)
    quarantined: int = 0  # lines too large to deliver, moved to <stream>.jsonl.quarantine
    run_id: str | None = None  # MLflow run of this stream (layout "runs")
    last_error: str = ""

    @staticmethod
    def path_for(spool_dir: str | os.PathLike[str], stream: str) -> str:
        return os.path.join(spool_dir, f"{stream}.state.json")

    @classmethod
    def load(cls, spool_dir: str | os.PathLike[str], stream: str) -> StreamState:
        path = cls.path_for(spool_dir, stream)
        return cls._from(read_json(path) or {}, path)

    def save(self, spool_dir: str | os.PathLike[str], stream: str) -> None:
        write_json_atomic(self.path_for(spool_dir, stream), dataclasses.asdict(self))


@dataclasses.dataclass
class SinkConfig(_SpoolFile):
    FILE: ClassVar[str] = SINK_FILE

    sink: str  # registry key: "mlflow" | "wflogger"
    layout: str = "runs"  # "runs" | "flat"
    tracking_uri: str | None = None
    experiment_name: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None  # the job's run (None for a rank logging without launcher)
    job: dict = dataclasses.field(default_factory=dict)  # job_id, job_name, tags for the parent run
    ranks: dict = dataclasses.field(default_factory=dict)  # label -> {device_id, server_id, host, log_path}
    final_status: str | None = None  # set by finish(): "FINISHED" | "FAILED"
    ended: bool = False  # runs terminated in the sink

    @property
    def servers(self) -> int:
        """How many servers share the job's parent run (1 for a single-server job)."""
        return int(self.job.get("servers", 1) or 1)


END_FILE = "end.json"
HELPER_FILE = "helper.json"


@dataclasses.dataclass
class JobEnd(_SpoolFile):
    """The launcher's word that the ranks have ended (end.json)."""
    FILE: ClassVar[str] = END_FILE

    status: str  # "FINISHED" | "FAILED"
    deadline: float  # epoch seconds: deliver until then, leave the rest to `sync`
    reason: str = ""  # why it failed (recorded on a multi-server job's parent run)
    last: bool = True  # False: --max-restarts starts another attempt, the parent stays open
    # servers whose launcher vanished (the job link saw it): their end is reported for them
    gone: list = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.gone = [str(s) for s in self.gone or ()]

    @classmethod
    def _from(cls, data: dict, path: str | os.PathLike[str] = "") -> JobEnd:
        """Typed as the launcher writes it: helpers and `sync` compare the deadline with time."""
        try:
            return cls(str(data["status"]), float(data["deadline"]), str(data.get("reason", "")),
                       bool(data.get("last", True)), list(data.get("gone") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise DamagedStateFile(path, f"{type(exc).__name__}: {exc}") from None


@dataclasses.dataclass
class HelperStatus(_SpoolFile):
    """The forwarding helper's progress (helper.json), read by the launcher and by tests."""
    FILE: ClassVar[str] = HELPER_FILE

    pid: int = 0
    phase: str = "starting"  # starting | forwarding | ending | done
    error: str = ""  # why the sink could not be set up or reached, if it could not
    runs_ended: bool = False


LOCK_POLL_S = 0.1


@contextmanager
def stream_lock(spool_dir: str | os.PathLike[str], stream: str, *, blocking: bool, timeout: float | None = None) -> Iterator[bool]:
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
