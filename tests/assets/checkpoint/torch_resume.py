"""A 2-rank torch DDP (gloo) job that checkpoints every epoch and resumes.

FAIL_RANK / FAIL_EPOCH: that rank exits after that epoch's checkpoint, on attempt 1 only.
EPOCHS (default 6). Each rank writes out/attempt<A>_rank<R>.json: the epoch it started
from, the epochs it ran and its final parameters. SAMPLES (default 128) in all sets an
epoch's length: 8 per step and rank.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from platform_plugin.checkpoint.torch import load_latest, save_checkpoint

dist.init_process_group("gloo")
rank = dist.get_rank()
attempt = int(os.environ["PLATFORM_ATTEMPT_NUMBER"])
epochs = int(os.environ.get("EPOCHS", "6"))
torch.manual_seed(0)
features = torch.randn(int(os.environ.get("SAMPLES", "128")), 8,
                       generator=torch.Generator().manual_seed(1))
dataset = TensorDataset(features, (features.sum(dim=1) > 0).long())
sampler = DistributedSampler(dataset, shuffle=True, seed=0, drop_last=True)
loader = DataLoader(dataset, batch_size=8, sampler=sampler, drop_last=True)
module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
state = load_latest()
start = 0
if state is not None:
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start = state["epoch"]
print("rank %d attempt %d starts at epoch %d" % (rank, attempt, start), flush=True)
model = DistributedDataParallel(module)
ran = []
for epoch in range(start, epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    ran.append(epoch + 1)
    save_checkpoint({"model": module.state_dict(), "optimizer": optimizer.state_dict()},
                    step=(epoch + 1) * len(loader), epoch=epoch + 1)
    print("rank %d attempt %d finished epoch %d" % (rank, attempt, epoch + 1), flush=True)
    if attempt == 1 and str(rank) == os.environ.get("FAIL_RANK") \
            and str(epoch + 1) == os.environ.get("FAIL_EPOCH"):
        os._exit(3)
os.makedirs("out", exist_ok=True)
with open("out/attempt%d_rank%d.json" % (attempt, rank), "w") as fh:
    json.dump({"rank": rank, "attempt": attempt, "start": start, "ran": ran,
               "params": [p.detach().flatten().tolist() for p in module.parameters()]}, fh)
# gloo's teardown races when the rank hosting the store leaves first (see
# tests/assets/launch/torch_ddp.py): everyone checks in, rank 0 leaves last, no C++ teardown.
store = dist.distributed_c10d._get_default_store()
store.add("finished", 1)
if rank == 0:
    while store.add("finished", 0) < dist.get_world_size():
        time.sleep(0.05)
sys.stdout.flush()
os._exit(0)
