"""A plain rank that resumes: logs `m` at steps 0..99, `m` = step + 1000 * (attempt - 1) + rank / 10
(so a test tells which attempt wrote a point). Before steps 0, 10, 20, ... it saves the step in
its own file in PLATFORM_CHECKPOINT_DIR (temporary name + rename: a plain script, not the
checkpoint helpers' step-N/ folders); an attempt resumes from the newest step every rank
saved. Rank 1 exits 3 after logging step 65 of attempt 1, once rank 0 has saved step 60 too:
the second attempt resumes from step 60 and replays steps 60..65."""
import os
import sys
import time

from platform_plugin.tracking import get_tracker

rank = int(os.environ["RANK_ID"])
world = int(os.environ["RANK_SIZE"])
attempt = int(os.environ.get("PLATFORM_ATTEMPT_NUMBER", "1"))
folder = os.environ["PLATFORM_CHECKPOINT_DIR"]  # the launcher made it; it outlives the attempts


def saved(of_rank):
    try:
        with open(os.path.join(folder, f"step-rank{of_rank}")) as f:
            return int(f.read())
    except FileNotFoundError:
        return 0


def save(step):
    path = os.path.join(folder, f"step-rank{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(path + ".tmp", path)


start = min(saved(r) for r in range(world))
tracker = get_tracker()
for step in range(start, 100):
    if step % 10 == 0:
        save(step)
    tracker.log_metric("m", step + 1000 * (attempt - 1) + rank / 10, step=step)
    if rank == 1 and attempt == 1 and step == 65:
        deadline = time.monotonic() + 60
        while saved(0) < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        tracker.close()
        sys.exit(3)
    time.sleep(0.005)
tracker.close()
