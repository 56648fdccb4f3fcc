"""The forwarder's side of a spool: the decoded lines of a stream not yet delivered, cut into
batches within a sink's limits, and the bad/oversized lines passed (set aside, quarantined) as
the stream's offset moves past them.

A bad line (tracking/rank/spool.py says why: not UTF-8, not JSON, nested too deep, a metric
whose value is no number...) is set aside in the stream's rejected file with that reason, as a
record the store refused is: a line that is JSON as `{"record": value, "reason": ...}` and
counted as rejected, any other as `{"line": text, "reason": ...}` and counted as skipped."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator

from platform_plugin.tracking.rank.spool import RECORD_DEPTH, Chunk
from platform_plugin.tracking.shared.state import StreamState
from platform_plugin.util.regular_file import loads_json, open_regular_file

KEYED_KINDS = ("p", "t")  # MLflow refuses a batch that repeats a param key
# beside a stream's spool: the records its store refused for good, one JSON object a line
# {"record": [...], "reason": "..."} (a stream's spool keeps them too, at their place)
REJECTED_SUFFIX = ".jsonl.rejected"
MAX_REJECTED_BYTES = 256 << 20  # ~2 million records set aside: a bound for its reader
MAX_REJECTED_LINE = 4 << 20  # a record is at most MAX_LINE_BYTES, escaped in JSON


def set_records_aside(spool_dir: str | os.PathLike[str], stream: str, refused: list) -> None:
    """Append (record, reason) pairs to the stream's rejected file, in one write."""
    _set_aside(spool_dir, stream, [{"record": record, "reason": reason} for record, reason in refused])


def _set_aside(spool_dir: str | os.PathLike[str], stream: str, entries: list) -> None:
    lines = "".join(json.dumps(entry, ensure_ascii=True) + "\n" for entry in entries)
    fd = os.open(os.path.join(spool_dir, stream + REJECTED_SUFFIX),  # never through a planted link
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with open(fd, "a", encoding="utf-8") as f:
        f.write(lines)


def set_aside_records(spool_dir: str | os.PathLike[str], stream: str) -> set:
    """The records of the stream's rejected file, each as json.dumps spells it (entries that
    are no record, a line set aside or a line no one can read, left out)."""
    found: set = set()
    try:
        with open_regular_file(os.path.join(spool_dir, stream + REJECTED_SUFFIX), within=os.fspath(spool_dir)) as f:
            if os.fstat(f.fileno()).st_size > MAX_REJECTED_BYTES:
                return found  # not what the forwarder writes: no record is known set aside
            for line in iter(lambda: f.readline(MAX_REJECTED_LINE), b""):
                try:
                    entry = loads_json(line, RECORD_DEPTH + 1)
                except ValueError:
                    continue
                if isinstance(entry, dict) and "record" in entry:
                    found.add(json.dumps(entry["record"]))
    except OSError:  # none, or no regular file (util/regular_file.py): nothing known set aside
        pass
    return found


def batches(records: Iterable[tuple[list, int]], limits: dict[str, int]) -> Iterator[Any]:
    """Consecutive slices of (record, end offset) pairs that a sink accepts in one call."""
    batch: list[tuple[list, int]] = []
    counts: dict[str, int] = {}
    keys: set[tuple[str, str]] = set()
    for item in records:
        kind = item[0][0]
        keyed = (kind, item[0][1]) if kind in KEYED_KINDS else None
        full = (counts.get(kind, 0) >= limits.get(kind, limits["total"]) or len(batch) >= limits["total"]
                or (keyed is not None and keyed in keys))
        if full and batch:
            yield batch
            batch, counts, keys = [], {}, set()
        batch.append(item)
        counts[kind] = counts.get(kind, 0) + 1
        if keyed is not None:
            keys.add(keyed)
    if batch:
        yield batch


@dataclass
class Reading:
    """A stream's decoded chunk, delivered a batch per turn."""
    chunk: Chunk
    offset: int  # the stream's offset at records[index]
    passed: "Passed"
    index: int = 0


class Passed:
    """Sets the bad lines aside (skipped or rejected, with the reason) and moves the oversized
    ones (quarantined) of a chunk as the stream's offset passes them."""

    def __init__(self, chunk: Chunk, spool: Path, quarantine: Path):
        self.bad = list(chunk.bad)
        self.big = list(chunk.big)
        self.spool, self.quarantine = spool, quarantine

    def up_to(self, state: StreamState) -> None:
        passed = []
        while self.bad and self.bad[0][1] <= state.offset:
            passed.append(self.bad.pop(0))
        if passed:
            self._set_bad_lines_aside(state, passed)
        while self.big and self.big[0][1] <= state.offset:
            start, end = self.big.pop(0)
            _copy_range(self.spool, self.quarantine, start, end)
            state.quarantined += 1
            state.last_error = (f"a {end - start:,}-byte line at offset {start} was moved to "
                                f"{self.quarantine.name}: too large to deliver")


    def _set_bad_lines_aside(self, state: StreamState, passed: list) -> None:
        entries = []
        with open_regular_file(str(self.spool), within=str(self.spool.parent)) as f:
            for start, end, why in passed:
                f.seek(start)
                raw = f.read(end - start).rstrip(b"\n")
                try:
                    entries.append({"record": loads_json(raw, RECORD_DEPTH), "reason": why})
                    state.rejected += 1
                except ValueError:
                    entries.append({"line": raw.decode("utf-8", "replace"), "reason": why})
                    state.skipped += 1
        _set_aside(self.spool.parent, self.spool.name[:-len(".jsonl")], entries)
        shown = entries[-1].get("record", entries[-1].get("line"))
        state.last_error = f"set aside {str(shown)[:80]} at offset {passed[-1][0]}: {passed[-1][2]}"[:500]


def _copy_range(source: Path, target: Path, start: int, end: int) -> None:
    with open(source, "rb") as src, open(target, "ab") as dst:
        src.seek(start)
        left = end - start
        while left > 0:
            block = src.read(min(left, 1 << 20))
            if not block:
                break
            dst.write(block)
            left -= len(block)


def next_batch(reading: Reading, limits: dict[str, int]) -> list[tuple[list, int]]:
    """The next batch of a reading (empty when only bad lines are left)."""
    records, start = reading.chunk.records, reading.index
    if start >= len(records):
        return []
    size = min(limits["total"], limits.get("m", limits["total"]))
    batch = records[start:start + size]
    if all([item[0][0] == "m" for item in batch]):  # metric points only (the usual case): no keys to check
        return batch
    return next(batches(islice(records, start, None), limits))


def advance(state: StreamState, reading: Reading, batch: list) -> bool:
    """Move the stream past a delivered batch; True when the reading is used up."""
    if batch:
        reading.index += len(batch)
        state.offset = reading.offset = batch[-1][1]
    used_up = reading.index >= len(reading.chunk.records)
    if used_up:
        state.offset = reading.chunk.end  # past trailing bad lines too
    reading.passed.up_to(state)
    return used_up
