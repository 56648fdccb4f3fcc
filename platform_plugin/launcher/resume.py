"""What a restarted attempt resumes from, and what the failure cost.

Before attempt K >= 2, node 0's launcher reads the newest complete checkpoint of the job's
checkpoint folder (checkpoint/manifest.py: the rule the ranks apply too) and sends its step
with the attempt's start (the job link's `go`, servers/identity.py's keys; the first attempt's
choice is part of the job's identity): every server gives its ranks that one step as
PLATFORM_RESUME_STEP, whatever its own folder holds. The steps lost are
the highest step the failed attempt reached minus the resume step: the ranks' tracking spools
on this server say that exactly; without them (`--tracking none`) the checkpoint folders the
failed attempt made give a lower bound; when neither says more than the resume step, "unknown".
Without a platform checkpoint the launcher knows only that the attempt started: a script may
keep snapshots of its own (the DDP tutorial's snapshot.pt), so nothing is said about where it
resumes or what the failure cost, only the step the failed attempt reached when that is known.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, Optional

from platform_plugin.checkpoint.manifest import (STEP_FOLDER, CheckpointUnavailable, read_record,
                                                 written_by)
from platform_plugin.launcher.planning.plan import LaunchPlan
from platform_plugin.launcher.servers.identity import CHECKPOINT_KEY, resume_keys, resume_step
from platform_plugin.tracking.rank.identity import SPOOL_SUFFIX
from platform_plugin.tracking.rank.spool import read_complete

READ_BYTES = 64 << 20
SYSTEM_PREFIX = "system/"  # the launcher's own samples: not a training step


@dataclasses.dataclass
class Resumed:
    """Attempt `attempt` (1-based, as the tables count) resumed from `step` (None: from the
    beginning) of checkpoint `checkpoint`; the failed attempt before it reached `reached`
    (None: nothing says), known `exactly` (the spools) or as a lower bound (checkpoints)."""

    attempt: int
    step: Optional[int]
    checkpoint: str
    reached: Optional[int]
    exactly: bool

    @property
    def lost(self) -> Optional[int]:
        """Steps done again; None when unknown (no platform checkpoint: a script's own
        snapshot may have kept them)."""
        if self.step is None or self.reached is None or self.reached <= self.step:
            return None
        return self.reached - self.step  # steps step..reached were done and are done again

    def describe(self) -> str:
        if self.step is None:  # what the script itself resumes from is its own business
            reached = ("" if self.reached is None else
                       f"; the failed attempt reached step {'' if self.exactly else 'at least '}"
                       f"{self.reached}")
            return (f"attempt {self.attempt} started; no platform checkpoint to resume from "
                    f"(the script may keep its own){reached}")
        where = f"from step {self.step} (checkpoint {self.checkpoint})"
        lost = self.lost
        if lost is None:
            cost = "steps lost to the failure: unknown"
        else:
            cost = f"{'' if self.exactly else 'at least '}{lost} steps lost to the failure"
        return f"attempt {self.attempt} resumed {where}, {cost}"

    def to_dict(self) -> dict:
        return {"attempt": self.attempt, "step": self.step, "checkpoint": self.checkpoint,
                "reached_step": self.reached, "reached_exactly": self.exactly,
                "steps_lost": self.lost, "text": self.describe()}


def proposal(plan: LaunchPlan, note: Callable[[str], None]) -> Dict[str, str]:
    """The identity keys of this server's choice for the next attempt (node 0's is the one
    every server gets back). A folder removed while the job ran is made again, empty: the next
    attempt starts from the beginning, and this says why."""
    try:
        return resume_keys(plan.checkpoint_dir)
    except CheckpointUnavailable:
        note(f"the checkpoint folder {plan.checkpoint_dir} was removed while the job ran: "
             f"attempt {plan.attempt + 1} has no platform checkpoint to resume from (the folder "
             "is made again, empty)")
        os.makedirs(plan.checkpoint_dir, exist_ok=True)
        return {}


def resumed(identity: Dict[str, str], failed: LaunchPlan, spool_dir: str,
            attempt: int) -> Resumed:
    """What attempt `attempt` (2, 3, ...) resumes from, and the highest step `failed` reached."""
    step = resume_step(identity)
    reached, exactly = highest_spooled_step(spool_dir), True
    if reached is None:
        reached, exactly = highest_checkpoint_step(failed.checkpoint_dir, failed.attempt), False
    return Resumed(attempt, step, identity.get(CHECKPOINT_KEY, "") if step is not None
                   else "", reached, exactly)


def highest_spooled_step(spool_dir: str) -> Optional[int]:
    """The highest step of any metric this server's ranks logged in the attempt (its spools)."""
    highest = None
    try:
        names = [n for n in os.listdir(spool_dir) if n.startswith("rank_")
                 and n.endswith(SPOOL_SUFFIX)]
    except OSError:  # untracked, or nothing spooled
        return None
    for name in names:
        path, offset = os.path.join(spool_dir, name), 0
        while True:
            try:
                chunk = read_complete(path, offset, READ_BYTES)
            except OSError:
                break
            for record, _end in chunk.records:
                if record[0] == "m" and not record[1].startswith(SYSTEM_PREFIX) \
                        and isinstance(record[3], int) and (highest is None or record[3] > highest):
                    highest = record[3]
            if chunk.end == offset:
                break
            offset = chunk.end
    return highest


def highest_checkpoint_step(checkpoint_dir: str, attempt: int) -> Optional[int]:
    """The highest step of a checkpoint folder attempt `attempt` (1, 2, ...) began (its manifest says the
    attempt; one without a manifest counts too: a rank died writing it)."""
    try:
        names = os.listdir(checkpoint_dir)
    except OSError:
        return None
    steps = []
    for name in names:
        match = STEP_FOLDER.fullmatch(name)
        if match is None:
            continue
        written_by = _attempt_of(os.path.join(checkpoint_dir, name))
        if written_by is None or written_by == attempt:
            steps.append(int(match.group(1)))
    return max(steps, default=None)


def _attempt_of(step_folder: str) -> Optional[int]:
    """The attempt a step folder's manifest names; None when there is none (or it cannot be
    read: checkpoint/manifest.py reads it as any file a rank can write)."""
    return written_by(read_record(step_folder))
