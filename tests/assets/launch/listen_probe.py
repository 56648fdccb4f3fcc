"""Joins a torch (gloo) job, says READY, waits for the file named by argv[1], leaves."""
import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
print(f"READY rank {dist.get_rank()}", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.1)
dist.barrier()
os._exit(0)
