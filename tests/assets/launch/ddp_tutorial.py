"""A DDP training script written the way pytorch/examples' ddp-tutorial-series
(multigpu_torchrun.py) is: it reads only what torchrun gives (LOCAL_RANK, RANK, WORLD_SIZE and
the env:// rendezvous), keeps its own snapshot (`snapshot.pt` in its working folder, resumed
when present), and decorates main with torch's @record. CPU: gloo. Synthetic data, made here.

    python ddp_tutorial.py TOTAL_EPOCHS SAVE_EVERY [--batch_size 32] [--samples 2048]
        [--fail-rank R --fail-epoch E]   (rank R raises in epoch E of a first attempt)
        [--env-out DIR]                  (each rank writes its environment to DIR/env_<RANK>.json)
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def synthetic(samples):
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.rand(samples, 20, generator=generator)
    return TensorDataset(inputs, inputs.sum(dim=1, keepdim=True) + 0.1 * torch.rand(
        samples, 1, generator=generator))


class Trainer:
    def __init__(self, model, data, optimizer, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.data, self.optimizer, self.save_every = data, optimizer, save_every
        self.snapshot_path, self.epochs_run = snapshot_path, 0
        if os.path.exists(snapshot_path):
            snapshot = torch.load(snapshot_path)
            model.load_state_dict(snapshot["MODEL_STATE"])
            self.epochs_run = snapshot["EPOCHS_RUN"]
            print(f"Resuming training from snapshot at Epoch {self.epochs_run}", flush=True)
        self.model = DistributedDataParallel(model)

    def epoch(self, number, fail):
        self.data.sampler.set_epoch(number)
        total = 0.0
        for source, targets in self.data:
            self.optimizer.zero_grad()
            loss = F.mse_loss(self.model(source), targets)
            loss.backward()
            self.optimizer.step()
            total += loss.item()
        if fail:
            raise RuntimeError(f"rank {self.global_rank} failed on purpose in epoch {number}")
        print(f"[GPU{self.global_rank}] Epoch {number} | Steps: {len(self.data)} | "
              f"loss {total / len(self.data):.4f}", flush=True)

    def train(self, total_epochs, fail_rank, fail_epoch):
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        for number in range(self.epochs_run, total_epochs):
            self.epoch(number, first_attempt and self.global_rank == fail_rank
                       and number == fail_epoch)
            if self.local_rank == 0 and number % self.save_every == 0:
                torch.save({"MODEL_STATE": self.model.module.state_dict(),
                            "EPOCHS_RUN": number + 1}, self.snapshot_path)


@record
def main(args):
    init_process_group(backend="gloo")
    if args.env_out:
        with open(os.path.join(args.env_out, f"env_{os.environ['RANK']}.json"), "w") as out:
            json.dump({**os.environ, "CWD": os.getcwd()}, out)
    world = int(os.environ["WORLD_SIZE"])
    dataset = synthetic(args.samples)
    data = DataLoader(dataset, batch_size=args.batch_size, shuffle=False,
                      sampler=DistributedSampler(dataset, num_replicas=world,
                                                 rank=int(os.environ["RANK"])))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    trainer = Trainer(model, data, torch.optim.SGD(model.parameters(), lr=1e-3),
                      args.save_every, "snapshot.pt")
    trainer.train(args.total_epochs, args.fail_rank, args.fail_epoch)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a DDP job as the tutorial writes it")
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-epoch", type=int, default=-1)
    parser.add_argument("--env-out", default="")
    main(parser.parse_args())
