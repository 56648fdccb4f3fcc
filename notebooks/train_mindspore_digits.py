"""MindSpore data-parallel training of a small MLP on sklearn's digits.

Runs unchanged as one process, as N CPU/GPU processes of MindSpore's dynamic cluster
(MS_ROLE / MS_SCHED_HOST / MS_SCHED_PORT / MS_WORKER_NUM, what `%dist_run` starts on CPU),
and as N Ascend processes with an HCCL rank table (RANK_TABLE_FILE / RANK_ID / DEVICE_ID).

The distributed checklist this script follows:
- every rank builds the same model from the same seed; DATA_PARALLEL + gradients_mean=True
  all-reduces and averages gradients, so the ranks stay bit-identical;
- each rank reads only its shard of the data (num_shards / shard_id); batches drop the
  remainder so every rank runs the same number of steps (an extra step on one rank would hang
  the all-reduce);
- the checkpoint is written once, by rank 0 (in data parallel every rank holds the full
  parameters, so "gathering" is a no-op and N writers would only race on one file);
- everyone waits at a barrier, then rank 0 reads the file and broadcasts it, so ranks on
  other servers do not need the file on their own disk;
- under the plugin's launcher (PLATFORM_CHECKPOINT_DIR set) rank 0 also checkpoints every
  epoch and every rank starts after the newest complete checkpoint: a job restarted by
  `--max-restarts` continues where it stopped instead of from epoch 0.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

# MindSpore's C++ log level, read at import: 3 = errors only. The dynamic cluster otherwise
# prints ~40 networking WARNING lines per rank on every start; `GLOG_v=2` brings them back.
os.environ.setdefault("GLOG_v", "3")

import mindspore as ms  # noqa: E402  (after GLOG_v)
import mindspore.dataset as ds  # noqa: E402
from mindspore import nn, ops  # noqa: E402
from mindspore.train import Callback, Model  # noqa: E402

from digits_common import (load_digits_split, log_hyperparameters, params_digest,  # noqa: E402
                           training_arguments, write_rank_summary)

CHECKPOINT_NAME = "digits_mlp.ckpt"


class DistributedContext:
    """Rank, world size and the collectives this script needs, single-process included."""

    def __init__(self) -> None:
        self.distributed = _launched_distributed()
        self.rank, self.size = 0, 1
        if self.distributed:
            from mindspore.communication import get_group_size, get_rank, init

            init()  # hccl on Ascend, nccl on GPU, mccl on CPU (dynamic cluster)
            self.rank, self.size = get_rank(), get_group_size()
            ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                         gradients_mean=True, device_num=self.size)

    # The collectives are ops primitives on the world group: they exist in every MindSpore
    # 2.x on Ascend, GPU and CPU. (comm_func.barrier has no CPU kernel in 2.10, and comm_func
    # defaults to "hccl_world_group", which does not exist on CPU: there it is "mccl_world_group".)
    def barrier(self) -> None:
        """An all-reduce of one number: no rank returns before every rank has arrived."""
        if self.distributed:
            from mindspore.communication import GlobalComm

            ops.AllReduce(group=GlobalComm.WORLD_COMM_GROUP)(ms.Tensor(np.ones(1, np.float32)))

    def broadcast_from_rank0(self, net: nn.Cell) -> None:
        if not self.distributed:
            return
        from mindspore.communication import GlobalComm

        broadcast = ops.Broadcast(root_rank=0, group=GlobalComm.WORLD_COMM_GROUP)
        for param in net.trainable_params():
            param.set_data(broadcast((param.value(),))[0])


def _launched_distributed() -> bool:
    """True when a launcher started this process as one rank of several.

    MS_ROLE marks a dynamic-cluster process: the scheduler runs this same script and lives
    inside init() until the workers finish. On Ascend the rank-table launch sets
    RANK_TABLE_FILE and RANK_SIZE. A lone `python train_mindspore_digits.py` is standalone.
    """
    if os.environ.get("MS_ROLE") in ("MS_SCHED", "MS_WORKER"):
        return True
    return bool(os.environ.get("RANK_TABLE_FILE")) and int(os.environ.get("RANK_SIZE", "1")) > 1


def select_device() -> None:
    """Let MindSpore pick its installed backend; on Ascend pin the rank's physical device.

    DEVICE_ID is the physical device of this rank from the rank table (set by the launcher).
    """
    if ms.get_context("device_target") == "Ascend" and os.environ.get("DEVICE_ID"):
        if hasattr(ms, "set_device"):  # MindSpore >= 2.5
            ms.set_device("Ascend", int(os.environ["DEVICE_ID"]))
        else:
            ms.set_context(device_id=int(os.environ["DEVICE_ID"]))


class DigitsMLP(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.SequentialCell(nn.Dense(64, 64), nn.ReLU(), nn.Dense(64, 10))

    def construct(self, x):
        return self.layers(x)


class EpochLoss(Callback):
    """Mean training loss per epoch on this rank (what the test checks falls)."""

    def __init__(self) -> None:
        super().__init__()
        self.per_epoch: list[float] = []
        self._losses: list[float] = []

    def on_train_step_end(self, run_context):
        self._losses.append(float(run_context.original_args().net_outputs.asnumpy()))

    def on_train_epoch_end(self, run_context):
        epoch = run_context.original_args().cur_epoch_num
        self.per_epoch.append(float(np.mean(self._losses)))
        self._losses.clear()
        print(f"epoch {epoch} loss {self.per_epoch[-1]:.4f}", flush=True)


def tracking_callbacks() -> list[Callback]:
    """The plugin's MetricsCallback (loss per step and epoch, samples/s, learning rate, to
    MLflow or wflogger, one run per rank) where platform_plugin is installed."""
    try:
        from platform_plugin.tracking.integrations.mindspore import MetricsCallback
    except ImportError:
        return []
    return [MetricsCallback()]


def resume_and_checkpoint(net: nn.Cell, optimizer: nn.Optimizer) -> tuple[int, list[Callback]]:
    """Under the plugin's launcher: the network and optimizer loaded from the newest complete
    checkpoint (the epoch to start after, 0 when there is none) and the callback that saves one
    every epoch. Elsewhere (plain msrun, one process): epoch 0 and no callback."""
    if not os.environ.get("PLATFORM_CHECKPOINT_DIR"):
        return 0, []
    from platform_plugin.checkpoint.mindspore import CheckpointCallback, restore

    return restore(net, optimizer), [CheckpointCallback()]


def shard(features, labels, ctx: DistributedContext, batch_size: int, seed: int):
    ds.config.set_seed(seed)  # same shuffle on every rank, so the shards partition the data
    data = ds.NumpySlicesDataset((features, labels), column_names=["x", "y"], shuffle=True,
                                 num_shards=ctx.size, shard_id=ctx.rank)
    return data.batch(batch_size, drop_remainder=True)


def named_params(net: nn.Cell) -> dict[str, np.ndarray]:
    return {p.name: p.asnumpy() for p in net.trainable_params()}


def accuracy(net: nn.Cell, features, labels) -> float:
    logits = net(ms.Tensor(features)).asnumpy()
    return float((logits.argmax(axis=1) == labels).mean())


def save_and_reload(net: nn.Cell, ctx: DistributedContext, out_dir: Path, seed: int) -> str:
    """Rank 0 writes the checkpoint; after a barrier rank 0 reads it and broadcasts it to a
    fresh, differently initialised model on every rank. Returns that model's digest."""
    path = out_dir / CHECKPOINT_NAME
    if ctx.rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        ms.save_checkpoint(net, str(path))
    ctx.barrier()
    ms.set_seed(seed + 1000 + ctx.rank)  # deliberately different weights before the load
    restored = DigitsMLP()
    if ctx.rank == 0:
        ms.load_param_into_net(restored, ms.load_checkpoint(str(path)), strict_load=True)
    ctx.broadcast_from_rank0(restored)
    return params_digest(named_params(restored))


def main(argv: list[str]) -> int:
    args = training_arguments(__doc__.splitlines()[0]).parse_args(argv)
    select_device()
    ctx = DistributedContext()
    ms.set_seed(args.seed)
    x_train, y_train, x_test, y_test = load_digits_split(args.sample_size, args.seed)
    data = shard(x_train, y_train, ctx, args.batch_size, args.seed)
    if data.get_dataset_size() == 0:
        print(f"sample_size {args.sample_size} leaves no full batch of {args.batch_size} per rank "
              f"on {ctx.size} ranks: raise --sample-size or lower --batch-size", file=sys.stderr)
        return 2

    net = DigitsMLP()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=args.lr, momentum=0.9)
    model = Model(net, loss_fn=loss_fn, optimizer=optimizer)
    epoch_loss = EpochLoss()
    initial_epoch, checkpointing = resume_and_checkpoint(net, optimizer)
    print(f"rank {ctx.rank}/{ctx.size}: {data.get_dataset_size()} steps per epoch, "
          f"{len(y_train)} training samples in all, "
          + (f"resuming after epoch {initial_epoch} (its checkpoint)" if initial_epoch
             else "from epoch 1 (no checkpoint to resume)"), flush=True)
    log_hyperparameters(args)
    started = time.monotonic()
    if initial_epoch < args.epochs:  # a checkpoint of the last epoch leaves nothing to train
        model.train(args.epochs, data, callbacks=[epoch_loss, *checkpointing, *tracking_callbacks()],
                    dataset_sink_mode=False, initial_epoch=initial_epoch)

    out_dir = Path(args.out_dir)
    trained_digest = params_digest(named_params(net))
    restored_digest = save_and_reload(net, ctx, out_dir, args.seed)
    write_rank_summary(out_dir, ctx.rank, {
        "framework": "mindspore",
        "rank": ctx.rank,
        "world_size": ctx.size,
        "initial_epoch": initial_epoch,
        "epoch_loss": epoch_loss.per_epoch,
        "test_accuracy": accuracy(net, x_test, y_test),
        "params_sha256": trained_digest,
        "restored_params_sha256": restored_digest,
        "checkpoint": str(out_dir / CHECKPOINT_NAME),
        "train_seconds": round(time.monotonic() - started, 3),
    })
    return 0 if restored_digest == trained_digest else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
