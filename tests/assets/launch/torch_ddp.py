"""torch gloo DDP on CPU: 3 steps on each rank's own data; prints the final weights."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK_ID"]), (rank, os.environ["RANK_ID"])
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(rank)
for _ in range(3):
    x, y = torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
weights = [p.detach().flatten().tolist() for p in model.parameters()]
print("RESULT " + json.dumps({"rank": rank, "world": world, "weights": weights}), flush=True)
# gloo's teardown races when the rank hosting the store (rank 0) leaves first: a late rank then
# dies in destroy_process_group with "terminate called without an active exception" (SIGABRT).
# So: everyone checks in on the store, rank 0 leaves last, and nobody runs the C++ teardown.
store = dist.distributed_c10d._get_default_store()
store.add("finished", 1)
if rank == 0:
    while store.add("finished", 0) < world:
        time.sleep(0.05)
sys.stdout.flush()
os._exit(0)
