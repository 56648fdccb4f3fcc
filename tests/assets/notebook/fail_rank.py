"""A rank script for the notebook-run tests: rank 1 fails fast, the others wait to be stopped."""
import os
import sys
import time

rank = int(os.environ["RANK_ID"])
print(f"rank {rank} starting on device {os.environ.get('DEVICE_ID')}", flush=True)
if rank == 1:
    print("rank 1: data shard missing", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(120)  # stopped by the launcher once rank 1 has failed
