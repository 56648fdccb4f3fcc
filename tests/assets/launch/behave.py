"""A rank that misbehaves on request: `behave.py MODE [ARG]`. Each rank reads RANK_ID.

Modes: ok | env | crash | segv | hang | chatty | grandchild [nofail] | daemon | lines N | flood
       | doublefork | sched-dies
       | escape ok|crash|hang
Prints `READY <pid>` first so tests know the rank is running."""
import json
import os
import signal
import subprocess
import sys
import time

mode = sys.argv[1]
rank = int(os.environ.get("RANK_ID", "-1"))
IGNORING_TERM = ("import os, signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                 "os.write(int(sys.argv[1]), b'up')\n")  # the child says when it ignores TERM


def child_ignoring_term(then, **popen):
    """A child that ignores SIGTERM, returned once it does (it says so through a pipe): a rank
    prints its pid only then, so a test that sees the pid knows the child is fully up."""
    ready, tell = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", IGNORING_TERM + then, str(tell)],
                             pass_fds=(tell,), **popen)
    os.close(tell)
    os.read(ready, 2)
    os.close(ready)
    return child


role = os.environ.get("MS_ROLE", "")
print(f"READY {os.getpid()} rank {rank} {role}", flush=True)

if mode == "ok":
    print(f"hello from rank {rank}")
elif mode == "env":
    keys = [k for k in os.environ if k.startswith(("RANK", "DEVICE", "LOCAL", "JOB_ID", "PLATFORM",
                                                  "MS_", "MASTER", "WORLD", "PYTHONUNBUF",
                                                  "ASCEND", "GROUP_RANK"))]
    print("ENV " + json.dumps({k: os.environ[k] for k in keys}))
elif mode == "crash":  # rank 1 fails, the others would run for a minute
    if rank == 1:
        time.sleep(0.3)
        print("about to fail: bad batch", file=sys.stderr)
        sys.exit(3)
    time.sleep(60)
elif mode == "segv":
    if rank == 1:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(60)
elif mode == "hang":
    time.sleep(600)
elif mode == "chatty":  # never silent, never ends
    while True:
        print("tick", flush=True)
        time.sleep(0.2)
elif mode == "grandchild":  # a child that ignores SIGTERM; rank 1 then fails (optional)
    child = child_ignoring_term("print('child up', flush=True)\ntime.sleep(600)")
    print(f"GRANDCHILD {child.pid}", flush=True)
    time.sleep(1.0)
    if rank == 1 and (len(sys.argv) < 3 or sys.argv[2] != "nofail"):
        sys.exit(3)
    time.sleep(600)
elif mode == "daemon":  # succeeds, but leaves a child behind that ignores SIGTERM
    subprocess.Popen([sys.executable, "-c", "import signal,time\n"
                      "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
elif mode == "escape":  # a grandchild in its own session (out of the rank's group) ignoring SIGTERM
    child = child_ignoring_term("time.sleep(300)", start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"ESCAPED {child.pid} {os.getpgid(child.pid)} {os.getpgid(0)}", flush=True)
    then = sys.argv[2]
    if then == "crash" and rank == 1:
        time.sleep(0.3)
        sys.exit(3)
    if then != "ok":  # hang, or the ranks that outlive the crashing one
        time.sleep(600)
elif mode == "lines":  # N numbered lines plus the awkward bytes a display must survive
    n = int(sys.argv[2])
    out = sys.stdout.buffer
    for i in range(n):
        out.write(b"rank %d line %d\n" % (rank, i))
    out.write(b"progress 10%\rprogress 50%\rprogress 100%\n")
    out.write(b"bad bytes \xff\xfe end\n")
    out.write(b"no newline at the end")
    out.flush()
elif mode == "doublefork":  # a daemon the classic way: fork, fork, parent exits; ignores TERM
    ready, tell = os.pipe()
    if os.fork() == 0:
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.write(tell, b"%d\n" % os.getpid())
            time.sleep(600)
        os._exit(0)
    os.close(tell)
    print(f"DAEMON {os.read(ready, 32).decode().strip()}", flush=True)  # once it ignores TERM
    time.sleep(0.5)
    if rank == 1:
        sys.exit(3)
    time.sleep(600)
elif mode == "flood":  # prints as fast as it can, forever (fills a log disk)
    line = b"%d " % rank + b"x" * 1000 + b"\n"
    while True:
        sys.stdout.buffer.write(line * 64)
        sys.stdout.buffer.flush()
elif mode == "sched-dies":  # ms-cluster backend: the scheduler fails, workers wait for it
    if role == "MS_SCHED":
        time.sleep(0.3)
        print("scheduler: cannot bind", flush=True)
        sys.exit(5)
    time.sleep(60)
else:
    sys.exit(f"unknown mode {mode}")
