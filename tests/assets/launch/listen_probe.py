"""Joins a torch (gloo) or MindSpore (mccl, CPU) job, says READY, waits for the file named by
argv[2], leaves. argv[1]: torch | mindspore."""
import os
import sys
import time

if sys.argv[1] == "torch":
    import torch.distributed as dist
    dist.init_process_group("gloo")
    dist.barrier()
    rank = dist.get_rank()
else:
    import mindspore as ms
    from mindspore.communication import get_rank, init
    ms.set_context(device_target="CPU")
    init()  # the scheduler runs the cluster inside init() until the workers leave
    rank = get_rank()
print(f"READY rank {rank}", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.1)
sys.stdout.flush()
if sys.argv[1] == "torch":
    os._exit(0)  # gloo's teardown races when the store's host leaves first (see torch_ddp.py)
# MindSpore: a normal exit, so the workers say goodbye to the scheduler and it ends with 0
