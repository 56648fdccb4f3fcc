"""A restarted job's points read as one curve per rank (docs/tracking.md, Restarts).

A restarted attempt resumes from a checkpoint and logs the steps from there again (the steps
replayed between the checkpoint and the failure). Its rank's run holds every attempt's points:
MLflow keeps every value logged at a step. Readers keep the latest attempt's: an attempt's
points supersede every earlier attempt's points from the first step it logged on (per metric).
Within one attempt nothing is dropped (a step logged several times - a counter reset every
epoch - stays as logged).

The attempts are told apart by their spool folders (a job that ran here) or, in the store, by
the start of each restarted attempt that its runs are tagged with (sinks/mlflow_job.py): every
point of an attempt was logged after it started, every point of the one before it earlier.
"""
from __future__ import annotations

import bisect
from typing import Sequence, TypeVar

# a point as (step, value, timestamp_ms, ...): the spools' tuples, the store's too
P = TypeVar("P", bound=Sequence)


def stitched(per_attempt: list[list[P]]) -> list[P]:
    """One series from each attempt's points (oldest attempt first): what a later attempt logged
    again replaces the earlier attempts' points from its first step on."""
    kept: list[P] = []
    floor = float("inf")  # the lowest step a later attempt logged
    for points in reversed(per_attempt):
        kept[:0] = [p for p in points if p[0] < floor]
        floor = min([floor] + [p[0] for p in points])
    return kept


def by_attempt(points: list[P], starts: list[int]) -> list[list[P]]:
    """A run's history split at the attempts' starts (ms): point -> the attempt it was logged in."""
    if not starts:
        return [points]
    parts: list[list[P]] = [[] for _ in range(len(starts) + 1)]
    for point in points:
        parts[bisect.bisect_right(starts, point[2])].append(point)
    return parts
