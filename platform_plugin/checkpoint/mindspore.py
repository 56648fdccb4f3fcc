"""MindSpore: checkpoints a restarted job resumes from, in PLATFORM_CHECKPOINT_DIR.

    from platform_plugin.checkpoint.mindspore import CheckpointCallback, restore
    initial_epoch = restore(net, optimizer)          # 0 when there is nothing to resume
    model.train(epochs, data, callbacks=[CheckpointCallback()], initial_epoch=initial_epoch)

`CheckpointCallback` saves the training network (the model's parameters and the optimizer's:
momenta, step, learning rate) every `every_n_epochs` epochs, on rank 0 only: in data parallel
every rank holds the same parameters. `resume_point()` gives the newest checkpoint complete
on every rank (the one the launcher chose for this attempt when it chose one) with the file
for `mindspore.load_checkpoint` and the epoch for `Model.train(..., initial_epoch=)`;
`restore()` does both steps on the cells it is given.

Rank side: Python 3.7 code; MindSpore is imported by name here only.
"""
from __future__ import annotations

import dataclasses
import os

import mindspore as ms
from mindspore.communication import get_rank
from mindspore.train import Callback

from platform_plugin.checkpoint.manifest import resume_point as newest_point
from platform_plugin.checkpoint.saving import save_step

CHECKPOINT_FILE = "train_network.ckpt"


@dataclasses.dataclass(frozen=True)
class MindSporeResume:
    """Where a rank resumes: `file` for `mindspore.load_checkpoint`, `epoch` (the epochs
    complete) for `Model.train(..., initial_epoch=)`, the global step and the attempt that
    wrote it."""

    file: str
    epoch: int
    step: int
    attempt: int


def rank() -> int:
    """This process's rank in the world group, 0 when the collectives were not initialised."""
    try:
        return int(get_rank())
    except (RuntimeError, ValueError):
        return 0


class CheckpointCallback(Callback):
    """Saves rank 0's training network at the end of every `every_n_epochs`-th epoch, and at
    the last epoch, as `step-<global step>/train_network.ckpt` with its manifest."""

    def __init__(self, every_n_epochs: int = 1, keep: int = 2):
        super().__init__()
        self.every = max(1, int(every_n_epochs))
        self.keep = max(1, int(keep))
        self.writes = False
        self.final_epoch = None

    def on_train_begin(self, run_context):
        self.writes = rank() == 0  # asked once init() has run, whenever the callback was made

    def on_train_epoch_begin(self, run_context):
        cb = run_context.original_args()
        if self.final_epoch is None:  # a resumed train() begins after epoch initial_epoch
            self.final_epoch = int(cb.cur_epoch_num) - 1 + int(cb.epoch_num)

    def on_train_epoch_end(self, run_context):
        cb = run_context.original_args()
        epoch = int(cb.cur_epoch_num)
        if not self.writes or (epoch % self.every and epoch != self.final_epoch):
            return
        # the step count of a resumed train() restarts at 0: the global step is counted from
        # the epochs, each of which runs batch_num steps without dataset sinking
        step = epoch * int(cb.batch_num)
        network = cb.train_network
        save_step(step, epoch, {CHECKPOINT_FILE: lambda path: save_network(network, path)},
                  keep=self.keep)


def save_network(network, path: str) -> str:
    """`mindspore.save_checkpoint` adds `.ckpt` to a name that lacks it (a temporary one):
    the path it wrote."""
    written = path if path.endswith(".ckpt") else path + ".ckpt"
    ms.save_checkpoint(network, written)
    return written


def resume_point():
    """The checkpoint this rank resumes from as a `MindSporeResume`, None when there is none."""
    point = newest_point()
    if point is None:
        return None
    return MindSporeResume(os.path.join(point.path, CHECKPOINT_FILE), int(point.epoch or 0),
                           point.step, point.attempt)


def restore(*cells) -> int:
    """Load the resume point into `cells` (the network, the optimizer) and return the epoch to
    pass as `initial_epoch`: 0 when there is nothing to resume."""
    point = resume_point()
    if point is None:
        return 0
    parameters = ms.load_checkpoint(point.file)
    for cell in cells:
        ms.load_param_into_net(cell, parameters)
    return point.epoch
