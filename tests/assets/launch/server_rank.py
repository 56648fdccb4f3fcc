"""A rank of a simulated multi-server job: `server_rank.py MODE [ARG]`.

env           print `ENV {...}` (the launcher's variables) and end
train [N]     log `loss` for N (default 20) steps through platform_plugin.tracking, then end
fail-on N     rank N exits 3 after 1 s (after logging 5 points); the others log and sleep 120 s
until FILE    once FILE exists (at most 120 s), log 5 points and end
fail-once     on the first attempt (PLATFORM_ATTEMPT_NUMBER=1) rank 0 exits 4; later attempts succeed
stubborn N    on the first attempt rank 0 exits 4 after 1 s and rank N ignores SIGTERM (prints
              `GOT SIGTERM`: its launcher is then busy stopping it); later attempts succeed
checkpoint-once  on the first attempt rank 0 writes the checkpoints of steps 10 and 20 into
              its server's PLATFORM_CHECKPOINT_DIR and exits 4; later attempts print
              `RESUMED <step>` (resume_point()) or `UNAVAILABLE <message>` and end
"""
import json
import os
import signal
import sys
import time

mode = sys.argv[1]
rank = int(os.environ["RANK_ID"])
env = {k: v for k, v in os.environ.items()
       if k.startswith(("RANK_", "JOB_ID", "PLATFORM_", "DEVICE_ID", "MASTER_"))}
print("ENV " + json.dumps(env), flush=True)


def log(steps):
    if os.environ.get("PLATFORM_TRACKING", "none") == "none":
        return
    from platform_plugin import tracking
    tracker = tracking.get_tracker()
    for step in range(steps):
        tracker.log_metric("loss", 1.0 / (step + 1) + rank, step=step)


if mode == "train":
    log(int(sys.argv[2]) if len(sys.argv) > 2 else 20)
elif mode == "fail-on":
    log(5)
    if rank == int(sys.argv[2]):
        time.sleep(1)
        sys.exit(3)
    time.sleep(120)
elif mode == "until":
    for _ in range(1200):
        if os.path.exists(sys.argv[2]):
            break
        time.sleep(0.1)
    log(5)
elif mode == "fail-once":
    log(5)
    if rank == 0 and os.environ.get("PLATFORM_ATTEMPT_NUMBER") == "1":
        sys.exit(4)
elif mode == "stubborn" and os.environ.get("PLATFORM_ATTEMPT_NUMBER") == "1":
    if rank == int(sys.argv[2]):
        signal.signal(signal.SIGTERM, lambda *_: print("GOT SIGTERM", flush=True))
    if rank == 0:
        time.sleep(1)
        sys.exit(4)
    for _ in range(120):
        time.sleep(1)
elif mode == "checkpoint-once":
    from platform_plugin.checkpoint import manifest
    if os.environ.get("PLATFORM_ATTEMPT_NUMBER") == "1":
        if rank == 0:
            for step in (10, 20):
                manifest.write_checkpoint(step, {"state": str(step).encode()})
            sys.exit(4)
    else:
        try:
            point = manifest.resume_point()
            print("RESUMED", None if point is None else point.step, flush=True)
        except manifest.CheckpointUnavailable as exc:
            print("UNAVAILABLE", exc, flush=True)
