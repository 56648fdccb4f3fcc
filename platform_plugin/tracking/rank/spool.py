"""The per-rank spool: an append-only JSON-lines file, written by the rank and read by the
forwarder.

One line is one record, a JSON array whose first item says what it is:

    ["m", key, value, step, timestamp_ms]     metric
    ["p", key, value]                          param
    ["t", key, value]                          tag
    ["a", copy, artifact_path|null]            artifact: `copy` is the file's copy the tracker
                                               made under the spool folder's `artifacts/`, named
                                               relative to the spool folder
    ["r", kind, name, reason]                  refused in the rank (over the sink's size limits):
                                               never sent, counted in the delivery report

Lines are written whole with one `os.write` on an O_APPEND descriptor, so a rank killed
mid-write leaves at most one partial line at the end. Readers consume complete lines only; a
writer that reopens a file ending in a partial line first terminates it, so the fragment
becomes one unparseable line that the reader skips and counts.

A spool is a file anyone who can write the job folder can append to (a script, an older
tracker, a disk that failed mid-line), so the reader trusts no line: it is opened as
util/regular_file.py opens what others write (a FIFO named rank_0.jsonl never blocks it), its
nesting is bounded before json parses it, and a line that is no record a sink can take - not
UTF-8, not JSON, 200,000 `[`, a metric whose value is "abc", a step that is no integer - is
returned with the reason (`Chunk.bad`): the forwarder sets it aside, the other readers skip it.
"""
from __future__ import annotations

import json
import os
import posixpath
import threading
import warnings
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from platform_plugin.tracking.rank.identity import SPOOL_SUFFIX  # noqa: F401 - the spool's name
from platform_plugin.util.regular_file import (json_depth, loads_json, open_regular_file,
                                                open_regular_for_writing)

FLUSH_LINES = 1000  # a full buffer is written at once; the timer writes the rest
# What a writer keeps in memory while its file cannot be written (a full disk): retried at every
# flush; records beyond it are dropped and counted, never raised into the training loop.
MAX_UNWRITTEN_BYTES = 32 << 20
# No valid record comes near this (the tracker refuses values over MLflow's limits, 8,000
# characters at most): a longer line is moved aside (quarantined) instead of being sent, so it
# can never hold up the records after it.
MAX_LINE_BYTES = 1 << 20
RECORD_DEPTH = 1  # a record is an array of scalars
MIN_INT64, MAX_INT64 = -(1 << 63), (1 << 63) - 1  # MLflow's steps and times
MAX_FLOAT = 1.7976931348623157e308  # an integer value beyond it has no float
# Where a rank's artifacts are copied when logged, beside the spools: an artifact record names a
# file under it, relative to the spool folder, and delivery ships no other file (a line naming
# ~/.ssh/id_rsa, planted in a spool, must not make the launcher's user upload it)
ARTIFACTS_FOLDER = "artifacts"
MAX_ARTIFACT_PATH = 4096  # PATH_MAX: no copy the tracker makes is named longer


def encode_metric(key_json: str, value: float, step: int, timestamp_ms: int) -> str:
    # value - value == 0 only for finite floats; NaN/Infinity take json's spelling
    number = repr(value) if value - value == 0.0 else json.dumps(value)
    return f'["m",{key_json},{number},{step},{timestamp_ms}]\n'


def encode(kind: str, *fields: Any) -> str:
    return json.dumps([kind, *fields], separators=(",", ":")) + "\n"


class SpoolWriter:
    """Buffered appender. `append` only touches memory (a lock and a list); the bytes reach the
    file when the buffer is full, on `flush()` (the tracker's timer) or at `close()`.

    A write that fails (ENOSPC, EIO) never raises into the caller - a rank's `log_metric` or
    the tracker's timer thread: the bytes not written are kept (the exact remainder, so a line
    cut by a short write continues where it stopped) and retried at the next write, up to
    MAX_UNWRITTEN_BYTES; records beyond that are dropped and counted (`dropped`). A warning
    says so when writing starts to fail, and `close()` names what could not be written."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # read too: its last byte (a line cut by a kill is ended before the next one)
        self._fd = open_regular_for_writing(str(self.path), os.O_RDWR | os.O_APPEND | os.O_CREAT)
        # re-entrant: the SIGTERM handler flushes from the main thread, maybe inside append()
        self._lock = threading.RLock()
        self._lines: list[str] = []
        self._unwritten = b""  # what a failed write left, retried first
        self.error: OSError | None = None  # the last write's failure, until a write succeeds
        self.dropped = 0
        self._terminate_partial_line()

    def _terminate_partial_line(self) -> None:
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            self._unwritten = b"\n"  # written first, now or at the next write (a full disk)
            self._write_locked()

    def append(self, line: str) -> None:
        with self._lock:
            if self.error is not None and len(self._unwritten) >= MAX_UNWRITTEN_BYTES:
                self.dropped += 1
                return
            self._lines.append(line)
            if len(self._lines) >= FLUSH_LINES:
                self._write_locked()

    def flush(self) -> None:
        with self._lock:
            self._write_locked()

    def _write_locked(self) -> None:
        if not (self._lines or self._unwritten) or self._fd < 0:
            return
        # swap first: a nested flush (SIGTERM) sees none
        data, self._unwritten = self._unwritten + "".join(self._lines).encode(), b""
        self._lines = []
        try:
            while data:  # a regular file takes it all at once; loop for the short-write case
                data = data[os.write(self._fd, data):]
        except OSError as exc:
            self._unwritten = data + self._unwritten
            if self.error is None:
                warnings.warn(f"platform_plugin.tracking: cannot write {self.path}: "
                              f"{exc.strerror or exc}; records are kept in memory (up to "
                              f"{MAX_UNWRITTEN_BYTES >> 20} MiB) and written when it works again",
                              stacklevel=2)
            self.error = exc
            return
        self.error = None

    def drop_buffer(self) -> None:
        """In a forked child: the parent's buffered lines are the parent's to write."""
        self._lock = threading.RLock()
        self._lines = []
        self._unwritten = b""

    def close(self) -> None:
        with self._lock:
            self._write_locked()
            lost = self._unwritten.count(b"\n") + self.dropped
            if lost and self.error is not None:
                warnings.warn(f"platform_plugin.tracking: {lost} record(s) could not be written to "
                              f"{self.path}: {self.error.strerror or self.error}", stacklevel=2)
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


@dataclass
class Chunk:
    """The records read from a spool file in one pass."""

    records: list[tuple[list, int]]  # (record, byte offset just after its line)
    end: int  # offset after the last complete line read (bad lines included)
    bad: list[tuple[int, int, str]]  # (start, end, why) of each complete line that is no valid record
    partial_tail: bool  # bytes after `end` with no newline yet
    big: list[tuple[int, int]] = field(default_factory=list)  # (start, end) of lines > MAX_LINE_BYTES

    @property
    def bad_ends(self) -> list[int]:
        return [end for _, end, _ in self.bad]

    @property
    def bad_lines(self) -> int:
        return len(self.bad)


def read_complete(path: str | os.PathLike, offset: int, max_bytes: int = 8 << 20) -> Chunk:
    """Complete lines from `offset`. A trailing fragment is not consumed: its writer may still
    finish it. A line longer than MAX_LINE_BYTES is returned in `big`, not decoded. Raises
    OSError (util/regular_file.Refused: a FIFO, a device, a link in the spool's place)."""
    path = os.fspath(path)
    with open_regular_file(path, within=os.path.dirname(os.path.abspath(path))) as f:
        f.seek(offset)
        data = f.read(max_bytes)
        last_newline = data.rfind(b"\n")
        if last_newline < 0 and len(data) == max_bytes:  # one line longer than a whole read
            return _long_line(f, offset)
    complete = data[: last_newline + 1]
    records, bad, big = _decode_lines(complete, offset)
    # a read that stopped at max_bytes mid-line is not a partial tail, only an unread rest
    partial = len(data) > len(complete) and len(data) < max_bytes
    return Chunk(records, offset + len(complete), bad, partial, big)


def _decode_lines(complete: bytes, offset: int) -> Any:
    """(records with end offsets, (start, end, why) of bad lines, (start, end) of oversized
    lines). One `json.loads` of the lines joined into an array (2.5x faster than one call per
    line), checked to hold exactly one valid record per line; any doubt (a bad, oversized or
    deeply nested line) decodes line by line."""
    lines = complete.split(b"\n")[:-1]  # `complete` ends with a newline
    ends = [offset + end for end in accumulate(len(line) + 1 for line in lines)]
    if max(map(len, lines), default=0) < MAX_LINE_BYTES and _shallow(complete, len(lines)):
        try:
            decoded = json.loads(b"[" + b",".join(lines) + b"]")
        except (ValueError, RecursionError):
            decoded = None
        if decoded is not None and len(decoded) == len(lines) and not any(map(refusal, decoded)):
            return list(zip(decoded, ends)), [], []
    records, bad, big = [], [], []
    for line, end in zip(lines, ends):
        start = end - len(line) - 1
        if len(line) + 1 > MAX_LINE_BYTES:
            big.append((start, end))
            continue
        record, why = _decode(line)
        if record is None:
            bad.append((start, end, why))
        else:
            records.append((record, end))
    return records, bad, big


def _shallow(complete: bytes, lines: int) -> bool:
    """Whether the lines joined into one array nest at most RECORD_DEPTH + 1 deep: sure at
    once when there are no more brackets than lines (a metric line has one), else counted."""
    brackets = complete.count(b"[") + complete.count(b"{")
    return brackets <= lines or json_depth(complete) <= RECORD_DEPTH


def _long_line(f: Any, offset: int) -> Chunk:
    """Find the end of a line that started at `offset` and did not fit in one read."""
    position = f.tell()
    while True:
        block = f.read(1 << 20)
        if not block:  # still being written: wait for its newline
            return Chunk([], offset, [], True)
        newline = block.find(b"\n")
        if newline >= 0:
            end = position + newline + 1
            return Chunk([], end, [], False, [(offset, end)])
        position += len(block)


def _decode(raw: bytes) -> tuple[Any, str]:
    """(record, "") or (None, why it is none)."""
    if not raw.strip():
        return None, "an empty line"
    try:
        record = loads_json(raw, RECORD_DEPTH)
    except UnicodeDecodeError as exc:
        return None, "not UTF-8 (byte %d)" % exc.start
    except ValueError as exc:  # not JSON, too deep (util/regular_file.TooDeep)
        return None, str(exc).splitlines()[0][:200] if str(exc) else "not JSON"
    why = refusal(record)
    return (None, why) if why else (record, "")


def refusal(record: Any) -> str:
    """Why a decoded line is no record a sink can take ("" when it is one): the kind, the
    number of fields and each field's type (a metric's value a number, its step and time
    integers, names and values valid Unicode text)."""
    if (type(record) is list and len(record) == 5 and record[0] == "m"  # the usual record, at once
            and type(record[2]) is float and type(record[1]) is str and record[1].isascii()
            and type(record[3]) is int and MIN_INT64 <= record[3] <= MAX_INT64
            and type(record[4]) is int and MIN_INT64 <= record[4] <= MAX_INT64):
        return ""
    return _refusal(record)


def _refusal(record: Any) -> str:
    if type(record) is not list or not record or not isinstance(record[0], str) or record[0] not in KINDS:
        return "not a record: a JSON array whose first item is one of %s" % ", ".join(KINDS)
    kind = record[0]
    if len(record) != KINDS[kind]:
        return "a %r record has %d fields, not %d" % (kind, len(record), KINDS[kind])
    if kind == "r":
        return ""  # counted only, never sent
    if not _text(record[1]):
        return "the name of a %r record is not text: %s" % (kind, _shown(record[1]))
    if kind == "m":
        if type(record[2]) not in (int, float):
            return "the value of metric %s is not a number: %s" % (_shown(record[1]), _shown(record[2]))
        if type(record[3]) is not int or type(record[4]) is not int:
            return "the step or time of metric %s is not an integer: %s, %s" % (
                _shown(record[1]), _shown(record[3]), _shown(record[4]))
        if not (MIN_INT64 <= record[3] <= MAX_INT64 and MIN_INT64 <= record[4] <= MAX_INT64):
            return "the step or time of metric %s is out of range (64-bit integers): %s, %s" % (
                _shown(record[1]), _shown(record[3]), _shown(record[4]))
        if type(record[2]) is int and not -MAX_FLOAT <= record[2] <= MAX_FLOAT:
            return "the value of metric %s is out of range (a 64-bit float): %s" % (
                _shown(record[1]), _shown(record[2]))
        return ""
    if kind == "a":
        return artifact_refusal(record[1], record[2])
    return "" if _text(record[2]) else "the value of %r record %s is not text: %s" % (
        kind, _shown(record[1]), _shown(record[2]))


def artifact_refusal(copy: str, artifact_path: Any) -> str:
    """Why an artifact record is none a sink may take ("" when it is one): `copy` must name a
    file under the spool folder's ARTIFACTS_FOLDER, as a plain relative path (nothing absolute,
    no `..`: a record naming a file elsewhere is never shipped), and the artifact path, when
    given, a plain relative path in the run's artifacts (no `..` out of them)."""
    if not _plain(copy) or not copy.startswith(ARTIFACTS_FOLDER + "/") or len(copy) > MAX_ARTIFACT_PATH:
        return ("an artifact record names %s, not a copy under the spool folder's %s/ (only "
                "the copies the tracker makes are shipped)" % (_shown(copy), ARTIFACTS_FOLDER))
    return artifact_path_refusal(artifact_path)


def artifact_path_refusal(artifact_path: Any) -> str:
    """Why an artifact's folder in the run is refused ("" for None or a plain relative path)."""
    if artifact_path is not None and not (_text(artifact_path) and _plain(artifact_path)):
        return "an artifact's path in the run is not a plain relative path: %s" % _shown(artifact_path)
    return ""


def _plain(path: str) -> bool:
    """A relative path that names itself: no leading `/`, no `.` or `..` part, no empty part."""
    return (bool(path) and "\0" not in path and posixpath.normpath(path) == path
            and not path.startswith("/") and path != "." and ".." not in path.split("/"))


def _text(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")  # a lone surrogate ("\\ud800") is JSON, but no store takes it
    except UnicodeEncodeError:
        return False
    return True


def _shown(value: Any) -> str:
    return repr(value)[:80]


KINDS = {"m": 5, "p": 3, "t": 3, "a": 3, "r": 4}  # kind -> fields per record
