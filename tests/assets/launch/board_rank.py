"""A rank for the board tests: logs `loss` through the tracker and prints a line per step.

    board_rank.py STEPS SLEEP_S [FAIL_RANK] [CHATTER]
A MindSpore-style networking line is printed first (the board keeps it out of the display).
"""
import os
import sys
import time

from platform_plugin import tracking

steps, sleep_s = int(sys.argv[1]), float(sys.argv[2])
fail_rank = sys.argv[3] if len(sys.argv) > 3 else ""
rank = os.environ["RANK_ID"]
print(f"[WARNING] DISTRIBUTED({os.getpid()},7f00,python):2026-01-01 [tcp_comm.cc:485] Connect] "
      "Connection 11 source: 127.0.0.1:1, destination: 127.0.0.1:2", flush=True)
tracker = tracking.get_tracker()
for step in range(steps):
    tracker.log_metric("loss", 1.0 / (step + 1), step=step)
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(sleep_s)
if rank == fail_rank:
    print(f"rank {rank} about to fail", flush=True)
    sys.exit(3)
print(f"rank {rank} finished", flush=True)
