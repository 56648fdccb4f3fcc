"""A rank that resumes from its job's checkpoints: `resume_rank.py STEPS FAIL_AT [remove]`.

Prints `START <step>` (where resume_point() says to begin), logs `m` at every step when tracked,
and rank 0 writes a checkpoint every 10 steps. On the first attempt rank 1 waits for rank 0's
checkpoint at or below FAIL_AT (so the failure always comes after it), logs up to FAIL_AT and
exits 5 (with `remove`: after removing the whole checkpoint folder, as a user or a cleanup
might); rank 0 stops at FAIL_AT and sleeps until the launcher stops it. Later attempts run to
STEPS.
"""
import os
import shutil
import sys
import time

from platform_plugin.checkpoint import manifest

steps, fail_at = int(sys.argv[1]), int(sys.argv[2])
remove = sys.argv[3:] == ["remove"]
rank = int(os.environ["RANK_ID"])
first = os.environ["PLATFORM_ATTEMPT"] == "0"
point = manifest.resume_point()
start = 0 if point is None else point.step + 1
print("START", start, flush=True)
tracker = None
if os.environ.get("PLATFORM_TRACKING", "none") != "none":
    from platform_plugin import tracking
    tracker = tracking.get_tracker()


def wait_for_checkpoint(step):
    for _ in range(1200):
        found = manifest.newest_complete(manifest.checkpoint_dir())
        if found is not None and found.step >= step:
            return
        time.sleep(0.1)
    sys.exit("rank 0 never wrote the checkpoint of step %d" % step)


for step in range(start, steps):
    if first and rank == 1 and step == fail_at:
        wait_for_checkpoint(fail_at // 10 * 10)
    if tracker is not None:
        tracker.log_metric("m", float(step), step=step)
    if rank == 0 and step % 10 == 0:
        manifest.write_checkpoint(step, {"step": str(step).encode()})
    if first and step == fail_at:
        if rank == 1:
            if remove:
                shutil.rmtree(manifest.checkpoint_dir())
            if tracker is not None:
                tracker.close()
            sys.exit(5)
        time.sleep(120)
print("DONE", flush=True)
