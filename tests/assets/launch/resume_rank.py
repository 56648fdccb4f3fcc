"""A rank that resumes from its job's checkpoints: `resume_rank.py STEPS FAIL_AT [remove|half]`.

Prints `START <step>` (where resume_point() says to begin), logs `m` at every step when tracked,
and rank 0 writes a checkpoint every 10 steps. On the first attempt rank 1 waits for rank 0's
checkpoint at or below FAIL_AT (so the failure always comes after it), logs up to FAIL_AT and
exits 5 (with `remove`: after removing the whole checkpoint folder, as a user or a cleanup
might); rank 0 stops at FAIL_AT and sleeps until the launcher stops it. With `half` it is rank
0 that dies instead, by SIGKILL, between the data of a checkpoint of FAIL_AT and its manifest,
and rank 1 sleeps. With `hostile` rank 1 plants the traps of tests/hostile.py in the checkpoint
folder before it exits: step folders above FAIL_AT whose manifest is 200,000 `[` or a FIFO, one
that is a link to a complete checkpoint outside, one whose data file is a link to /etc/passwd of
the listed size. Later attempts run to STEPS.
"""
import json
import os
import shutil
import signal
import sys
import time

from platform_plugin.checkpoint import manifest

steps, fail_at = int(sys.argv[1]), int(sys.argv[2])
remove, half, hostile = (sys.argv[3:] == ["remove"], sys.argv[3:] == ["half"],
                         sys.argv[3:] == ["hostile"])
rank = int(os.environ["RANK_ID"])
first = os.environ["PLATFORM_ATTEMPT_NUMBER"] == "1"
point = manifest.resume_point()
start = 0 if point is None else point.step + 1
print("START", start, flush=True)
tracker = None
if os.environ.get("PLATFORM_TRACKING", "none") != "none":
    from platform_plugin import tracking
    tracker = tracking.get_tracker()


def plant_traps(folder, above):
    """What a stranger (or a broken rank) leaves in the checkpoint folder between attempts."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))))  # the repository: tests/hostile.py
    from pathlib import Path
    from tests import hostile as traps
    folder = Path(folder)
    deep, fifo, linked, passwd = (folder / manifest.step_path("", above + n).lstrip("/")
                                  for n in (10, 20, 30, 35))
    for step_folder in (deep, fifo, passwd):
        step_folder.mkdir()
    traps.plant("200,000-deep JSON", deep / manifest.MANIFEST)
    traps.plant("fifo", fifo / manifest.MANIFEST)
    outside = folder.parent / "outside"
    outside.mkdir()
    manifest.write_checkpoint(above + 30, {"step": b"forged"}, directory=str(outside))
    traps.link_step_folder_out(folder, linked.name, outside / linked.name)
    (passwd / "step").symlink_to(traps.PASSWD)
    (passwd / manifest.MANIFEST).write_text(json.dumps(
        {"step": above + 35, "epoch": None, "attempt": 0, "rank": 0, "time": 1.0,
         "files": {"step": traps.passwd_size()}}))


def wait_for_checkpoint(step):
    for _ in range(1200):
        found = manifest.newest_complete(manifest.checkpoint_dir())
        if found is not None and found.step >= step:
            return
        time.sleep(0.1)
    sys.exit("rank 0 never wrote the checkpoint of step %d" % step)


for step in range(start, steps):
    if first and rank == 1 and step == fail_at and not half:
        wait_for_checkpoint(fail_at // 10 * 10)
    if tracker is not None:
        tracker.log_metric("m", float(step), step=step)
    if rank == 0 and step % 10 == 0:
        manifest.write_checkpoint(step, {"step": str(step).encode()})
    if first and step == fail_at:
        if half and rank == 0:  # the data, then killed before the manifest
            manifest.write_file(manifest.step_folder(step), "step", str(step).encode())
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == 1 and not half:
            if remove:
                shutil.rmtree(manifest.checkpoint_dir())
            if hostile:
                plant_traps(manifest.checkpoint_dir(), fail_at)
            if tracker is not None:
                tracker.close()
            sys.exit(5)
        time.sleep(120)
print("DONE", flush=True)
