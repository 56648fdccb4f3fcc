"""What a job's spools hold that is not delivered yet, read from the offset files alone.

The launcher polls this at the end of a tracked job ("is everything in?") and reports the totals,
while the forwarding helper delivers; it needs neither the sink nor the forwarder. The forwarder
(forwarder.py) counts the same way through these functions.
"""
from __future__ import annotations

import dataclasses
import os

from platform_plugin.tracking.shared.state import StreamState
from platform_plugin.tracking.rank.identity import SPOOL_SUFFIX, stream_name
from platform_plugin.util.regular_file import Refused, open_regular_file
from platform_plugin.variables import PLATFORM_TRACKING_DRAIN_TIMEOUT


def drain_timeout(default: float) -> float:
    """Seconds to wait for delivery at the end: PLATFORM_TRACKING_DRAIN_TIMEOUT, else `default`."""
    value = PLATFORM_TRACKING_DRAIN_TIMEOUT.get()
    return default if value is None else value


def spool_labels(spool_dir: str | os.PathLike[str]) -> list[str]:
    """The streams of a spool folder: rank ids and `no-rank` (not the `.quarantine` files)."""
    try:
        names = os.listdir(spool_dir)
    except FileNotFoundError:
        return []
    labels = (name[len("rank_"):-len(SPOOL_SUFFIX)] for name in names
              if name.startswith("rank_") and name.endswith(SPOOL_SUFFIX))
    return sorted(label for label in labels if "." not in label)


def any_spooled(spool_dir: str | os.PathLike[str], on_error: bool) -> bool:
    """A rank wrote a record into its spool (a non-empty `rank_*.jsonl`). `on_error` is the
    answer when the folder (or a file in it) cannot be read: the launcher, waiting for a first
    record before it starts the helper, says False (not made yet: keep waiting); the helper,
    idling before it imports its sink, says True (removed meanwhile: stop idling)."""
    try:
        with os.scandir(spool_dir) as entries:
            return any(e.name.startswith("rank_") and e.name.endswith(SPOOL_SUFFIX) and e.stat().st_size
                       for e in entries)
    except OSError:
        return on_error


def spool_path(spool_dir: str | os.PathLike[str], label: str) -> str:
    return os.path.join(spool_dir, f"{stream_name(label)}{SPOOL_SUFFIX}")


def count_pending(path: str | os.PathLike[str], offset: int) -> tuple[int, bool]:
    """(complete lines after `offset`, whether a partial line follows them). What is no regular
    file of the spool folder (a FIFO, a link planted there) holds nothing to deliver: the
    forwarder says why it cannot read it."""
    path = os.fspath(path)
    lines, last = 0, b"\n"
    try:
        with open_regular_file(path, within=os.path.dirname(os.path.abspath(path))) as f:
            f.seek(offset)
            for block in iter(lambda: f.read(1 << 20), b""):  # never the whole rest at once
                lines += block.count(b"\n")
                last = block[-1:]
    except (FileNotFoundError, Refused):
        return 0, False
    return lines, last != b"\n"


def stream_pending(spool_dir: str | os.PathLike[str], label: str) -> int:
    offset = StreamState.load(spool_dir, stream_name(label)).offset
    return count_pending(spool_path(spool_dir, label), offset)[0]


def all_delivered(spool_dir: str | os.PathLike[str], labels: list[str]) -> bool:
    """Cheap: every stream's offset is at its last complete line (polled by the launcher)."""
    for label in labels:
        offset = StreamState.load(spool_dir, stream_name(label)).offset
        path = spool_path(spool_dir, label)
        try:
            if os.stat(path).st_size > offset and count_pending(path, offset)[0]:
                return False
        except FileNotFoundError:
            continue
    return True


@dataclasses.dataclass
class Counts:
    """A job's totals over its streams (the delivery report's numbers)."""
    delivered: int = 0
    pending: int = 0
    skipped: int = 0
    rejected: int = 0
    refused: int = 0
    quarantined: int = 0
    partial_lines: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)


def totals(spool_dir: str | os.PathLike[str], labels: list[str], errors: list[str] | None = None) -> Counts:
    total = Counts(errors=[] if errors is None else errors)
    for label in labels:
        state = StreamState.load(spool_dir, stream_name(label))
        pending, partial = count_pending(spool_path(spool_dir, label), state.offset)
        total.delivered += state.delivered
        total.skipped += state.skipped
        total.rejected += state.rejected
        total.refused += state.refused
        total.quarantined += state.quarantined
        total.pending += pending
        total.partial_lines += int(partial)
    return total
