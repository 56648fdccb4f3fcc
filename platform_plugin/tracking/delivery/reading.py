"""The forwarder's side of a spool: the decoded lines of a stream not yet delivered, cut into
batches within a sink's limits, and the bad/oversized lines passed (counted, quarantined) as the
stream's offset moves past them."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator

from platform_plugin.tracking.rank.spool import Chunk
from platform_plugin.tracking.shared.state import StreamState

KEYED_KINDS = ("p", "t")  # MLflow refuses a batch that repeats a param key
# beside a stream's spool: the records its store refused for good, one JSON object a line
# {"record": [...], "reason": "..."} (a stream's spool keeps them too, at their place)
REJECTED_SUFFIX = ".jsonl.rejected"


def set_records_aside(spool_dir: str | os.PathLike[str], stream: str, refused: list) -> None:
    """Append (record, reason) pairs to the stream's rejected file, in one write."""
    lines = "".join(json.dumps({"record": record, "reason": reason}) + "\n" for record, reason in refused)
    with open(os.path.join(spool_dir, stream + REJECTED_SUFFIX), "a", encoding="utf-8") as f:
        f.write(lines)


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


def _passed(bad_ends: list[int], offset: int) -> int:
    """Remove and count the bad lines that end at or before `offset`."""
    n = 0
    while bad_ends and bad_ends[0] <= offset:
        bad_ends.pop(0)
        n += 1
    return n


@dataclass
class Reading:
    """A stream's decoded chunk, delivered a batch per turn."""
    chunk: Chunk
    offset: int  # the stream's offset at records[index]
    passed: "Passed"
    index: int = 0


class Passed:
    """Counts the bad lines (skipped) and moves the oversized ones (quarantined) of a chunk as
    the stream's offset passes them."""

    def __init__(self, chunk: Chunk, spool: Path, quarantine: Path):
        self.bad_ends = list(chunk.bad_ends)
        self.big = list(chunk.big)
        self.spool, self.quarantine = spool, quarantine

    def up_to(self, state: StreamState) -> None:
        state.skipped += _passed(self.bad_ends, state.offset)
        while self.big and self.big[0][1] <= state.offset:
            start, end = self.big.pop(0)
            _copy_range(self.spool, self.quarantine, start, end)
            state.quarantined += 1
            state.last_error = (f"a {end - start:,}-byte line at offset {start} was moved to "
                                f"{self.quarantine.name}: too large to deliver")


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
