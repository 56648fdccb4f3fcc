"""PyTorch DDP training of a small MLP on sklearn's digits.

Runs unchanged as one process, under `%dist_run --backend torch` / `platform-run launch
--backend torch` / torchrun (env:// rendezvous: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), with gloo on CPU, nccl on CUDA and hccl on Ascend (torch_npu).

The distributed checklist this script follows:
- DistributedSampler gives each rank its own shard; set_epoch(epoch) reshuffles it every
  epoch (without it every epoch repeats the same order); drop_last keeps step counts equal;
- DDP broadcasts rank 0's initial weights and averages gradients, so ranks stay identical;
- only rank 0 writes the checkpoint (the state_dict of the unwrapped module, so it loads
  without DDP); a barrier makes the others wait until the file is complete;
- rank 0 reads the checkpoint and broadcasts it, so other servers need no copy of the file;
- under the plugin's launcher (PLATFORM_CHECKPOINT_DIR set) every epoch ends with a checkpoint
  (model, optimizer, random generators; rank 0 writes, all wait) and every rank starts from
  the newest complete one: a job restarted by `--max-restarts` continues where it stopped.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from digits_common import (load_digits_split, log_hyperparameters, params_digest,
                           training_arguments, write_rank_summary)

CHECKPOINT_NAME = "digits_mlp.pt"


@dataclass(frozen=True)
class Accelerator:
    kind: str
    process_group_backend: str

    def device(self) -> torch.device:
        if self.kind == "cpu":
            return torch.device("cpu")
        # DEVICE_ID is the rank's physical device from the rank table; LOCAL_RANK elsewhere
        index = int(os.environ.get("DEVICE_ID", os.environ.get("LOCAL_RANK", "0")))
        getattr(torch, self.kind).set_device(index)
        return torch.device(self.kind, index)


def _npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except ImportError:
        return False
    return torch.npu.is_available()


# First available wins: Ascend, then CUDA, then CPU.
ACCELERATORS = [
    (_npu_available, Accelerator("npu", "hccl")),
    (torch.cuda.is_available, Accelerator("cuda", "nccl")),
    (lambda: True, Accelerator("cpu", "gloo")),
]


def pick_accelerator() -> Accelerator:
    return next(acc for available, acc in ACCELERATORS if available())


def digits_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def named_params(model: nn.Module) -> dict:
    return {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}


def loop_logger():
    """Per-step loss and samples/s through the plugin's tracker, when it is installed."""
    try:
        from platform_plugin.tracking.integrations.torch import LoopLogger
    except ImportError:
        return None
    return LoopLogger()


def resume(module: nn.Module, optimizer) -> int:
    """Under the plugin's launcher: the model and optimizer loaded from the newest complete
    checkpoint, and the epoch to start from (0 when there is none, or without the launcher)."""
    if not os.environ.get("PLATFORM_CHECKPOINT_DIR"):
        return 0
    from platform_plugin.checkpoint.torch import load_latest

    state = load_latest()
    if state is None:
        return 0
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"]


def checkpoint(module: nn.Module, optimizer, step: int, epochs_done: int) -> None:
    if os.environ.get("PLATFORM_CHECKPOINT_DIR"):
        from platform_plugin.checkpoint.torch import save_checkpoint

        save_checkpoint({"model": module.state_dict(), "optimizer": optimizer.state_dict()},
                        step=step, epoch=epochs_done)


def train(model, module, optimizer, loader, sampler, epochs, start, device, logger) -> list[float]:
    loss_fn = nn.CrossEntropyLoss()
    per_epoch = []
    if logger is not None:  # a resumed curve continues at the checkpoint's step
        logger.global_step, logger.epoch = start * len(loader), start
    for epoch in range(start, epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        losses = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if logger is not None:
                logger.step(losses[-1], batch_size=len(x))
        per_epoch.append(sum(losses) / len(losses))
        print(f"epoch {epoch + 1} loss {per_epoch[-1]:.4f}", flush=True)
        if logger is not None:
            logger.epoch_end()
        checkpoint(module, optimizer, (epoch + 1) * len(loader), epoch + 1)
    return per_epoch


def save_and_reload(module: nn.Module, rank: int, out_dir: Path, seed: int, device) -> str:
    """Rank 0 writes; after a barrier rank 0 reads and broadcasts into a fresh,
    differently initialised model on every rank. Returns that model's digest."""
    path = out_dir / CHECKPOINT_NAME
    distributed = dist.is_initialized()
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        torch.save(module.state_dict(), path)
    if distributed:
        dist.barrier()
    torch.manual_seed(seed + 1000 + rank)  # deliberately different weights before the load
    restored = digits_mlp().to(device)
    if rank == 0:
        restored.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    if distributed:
        for tensor in restored.state_dict().values():
            dist.broadcast(tensor, src=0)
    return params_digest(named_params(restored))


def main(argv: list[str]) -> int:
    args = training_arguments(__doc__.splitlines()[0]).parse_args(argv)
    accelerator = pick_accelerator()
    device = accelerator.device()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group(accelerator.process_group_backend)  # env:// rendezvous
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1

    torch.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load_digits_split(args.sample_size, args.seed)
    dataset = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train).long())
    sampler = (DistributedSampler(dataset, shuffle=True, seed=args.seed, drop_last=True)
               if distributed else None)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        shuffle=sampler is None, drop_last=True)
    if len(loader) == 0:
        print(f"sample_size {args.sample_size} leaves no full batch of {args.batch_size} per rank "
              f"on {world_size} ranks: raise --sample-size or lower --batch-size", file=sys.stderr)
        return 2

    module = digits_mlp().to(device)
    optimizer = torch.optim.SGD(module.parameters(), lr=args.lr, momentum=0.9)
    start = resume(module, optimizer)  # before DDP, which broadcasts rank 0's weights
    model = DistributedDataParallel(module) if distributed else module
    print(f"rank {rank}/{world_size} on {device} ({accelerator.process_group_backend}): "
          f"{len(loader)} steps per epoch, {len(dataset)} training samples in all, "
          + (f"resuming after epoch {start} (its checkpoint)" if start
             else "from epoch 1 (no checkpoint to resume)"), flush=True)
    started = time.monotonic()
    log_hyperparameters(args)
    epoch_loss = train(model, module, optimizer, loader, sampler, args.epochs, start, device,
                       loop_logger())

    out_dir = Path(args.out_dir)
    trained_digest = params_digest(named_params(module))
    restored_digest = save_and_reload(module, rank, out_dir, args.seed, device)
    with torch.no_grad():
        logits = module(torch.from_numpy(x_test).to(device)).cpu()
    write_rank_summary(out_dir, rank, {
        "framework": "torch",
        "rank": rank,
        "world_size": world_size,
        "initial_epoch": start,
        "epoch_loss": epoch_loss,
        "test_accuracy": float((logits.argmax(1).numpy() == y_test).mean()),
        "params_sha256": trained_digest,
        "restored_params_sha256": restored_digest,
        "checkpoint": str(out_dir / CHECKPOINT_NAME),
        "train_seconds": round(time.monotonic() - started, 3),
    })
    if distributed:
        dist.destroy_process_group()
    return 0 if restored_digest == trained_digest else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
