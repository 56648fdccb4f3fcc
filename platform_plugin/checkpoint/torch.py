"""PyTorch: checkpoints a restarted job resumes from, in PLATFORM_CHECKPOINT_DIR.

    from platform_plugin.checkpoint.torch import load_latest, save_checkpoint
    state = load_latest()                     # None when there is nothing to resume
    start = 0
    if state is not None:
        module.load_state_dict(state["model"]); optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
    for epoch in range(start, epochs):
        sampler.set_epoch(epoch)
        ...
        save_checkpoint({"model": module.state_dict(), "optimizer": optimizer.state_dict()},
                        step=global_step, epoch=epoch + 1)

`save_checkpoint` is called by every rank: rank 0 writes (in DDP every rank holds the same
parameters), then every rank waits on a barrier when a process group is initialised, so no
rank runs ahead of a checkpoint that is not complete. The state gets rank 0's random number
generators (torch, Python's `random`, numpy's global one), which `load_latest` restores:
what a step draws after a resume is what it would have drawn. `epoch` is the number of
epochs complete, the one to start the next epoch's loop (and `set_epoch`) from.

Rank side: Python 3.7 code; torch is imported by name here only.
"""
from __future__ import annotations

import os
import random

import torch
import torch.distributed as dist

from platform_plugin.checkpoint.manifest import resume_point
from platform_plugin.checkpoint.saving import save_step

STATE_FILE = "state.pt"
RNG_KEY = "rng"


def rank() -> int:
    """This process's rank: the process group's, else torchrun's RANK, else 0."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0") or 0)


def save_checkpoint(state: dict, step: int, epoch=None, keep: int = 2):
    """Save `state` (plus `step`, `epoch` and the random generators) as checkpoint `step`.

    Every rank calls it; rank 0 writes and returns the checkpoint's folder, the others None.
    `keep` complete checkpoints stay in the folder.
    """
    folder = None
    if rank() == 0:
        payload = dict(state)
        payload.update(step=int(step), epoch=epoch)
        payload[RNG_KEY] = rng_state()
        folder = save_step(int(step), epoch, {STATE_FILE: lambda path: torch.save(payload, path)},
                           keep=keep)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    return folder


def load_latest(restore_rng: bool = True):
    """The newest complete checkpoint's state (on the CPU: `load_state_dict` moves it), with
    `step` and `epoch`; None when there is nothing to resume. Restores the random generators
    the state was saved with unless `restore_rng` is False."""
    point = resume_point()
    if point is None:
        return None
    state = torch.load(os.path.join(point.path, STATE_FILE), map_location="cpu", weights_only=True)
    if restore_rng:
        set_rng_state(state[RNG_KEY])
    return state


def rng_state() -> dict:
    """The generators as plain values and tensors (what `torch.load(weights_only=True)` reads)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy as np
    except ImportError:
        return state
    kind, keys, position, has_gauss, cached = np.random.get_state(legacy=True)
    state["numpy"] = [kind, np.asarray(keys).tolist(), int(position), int(has_gauss), float(cached)]
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        import numpy as np
        kind, keys, position, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
