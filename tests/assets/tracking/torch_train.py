"""A tiny PyTorch loop on CPU for the tracking tests, logged with tracking.torch.LoopLogger."""
import os

import torch

from platform_plugin import tracking
from platform_plugin.tracking.integrations.torch import LoopLogger

EPOCHS, STEPS, BATCH = 2, 10, 8
rank = int(os.environ.get("RANK_ID", "0"))
torch.manual_seed(rank)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
tracking.get_tracker().log_params({"lr": 0.05, "batch": BATCH})
log = LoopLogger()
for epoch in range(EPOCHS):
    for step in range(STEPS):
        x = torch.randn(BATCH, 4)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.step(loss, batch_size=BATCH)
    log.epoch_end()
print(f"rank {rank} trained", flush=True)
