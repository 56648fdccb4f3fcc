"""The output part of bench/launch.py: the launcher's output path against the same ranks.

    .venv/bin/python bench/launch.py --only output [--rounds 5] [--no-write]

4 writer ranks x 250,000 lines (~58 bytes each), the same ranks with the same environment on
every side, alternating every round:
- to /dev/null, unbuffered (PYTHONUNBUFFERED=1, the launcher's default: a write per print)
  and with the ranks' own buffering (what `--buffered` keeps);
- each rank piped into a reader that only drains, on the launcher's schedule (64 KiB reads,
  passes 5 ms apart while output flows, the pipes never polled: no processing at all) — the
  floor for anything that captures output through a pipe;
- the same reader waiting in epoll on the pipes (the launcher's earlier design): since Linux
  5.16 a pipe that was ever polled wakes its waiters on every write, which the ranks pay;
- each rank piped into `cat` (which wakes up for every write);
- each rank writing its own file in the log folder (torchrun's `--tee` design, untailed);
- through `launch()` (rank logs + prefixed display on sys.stdout, a UTF-8 file on /dev/null:
  the CLI's path), both ways; and with the display through a `write=` callable taking text.
And a second writer whose lines look like a training rank's (logging lines with `[INFO]`,
tqdm-like `\\r` bars, MindSpore's networking chatter: bench/output_writers.py) to /dev/null, into
the pipe floor and through `launch()`: not the goal's row, reported beside it.
CPU of the launcher process (getrusage self) and of the ranks (children) per side explain
where a miss goes. Every line is counted in the rank logs (after the clock stopped: the bench's
own reading and removal of 58 MB of logs is not the launcher's time).
"""
from __future__ import annotations

import os
import resource
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import alternate, spread  # bench/benchdoc.py
from output_writers import plain as writer, realistic  # bench/output_writers.py

LINES = 250_000
RANKS = 4
FREE_CORE_LINES = 1_000_000  # one rank, so a core stays free for the launcher


WRITER = writer(LINES)
REAL_WRITER = realistic(LINES)  # not the goal's row: what a training rank prints
GOAL = 1.2
SHM = "/dev/shm"  # tmpfs: a file in memory, no disk behind the rank's writes


def _cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _with_cpu(run, cpu: dict, name: str):
    """`run`, recording the CPU seconds of this process and of its waited-for children (what
    `run` returns, its checks and cleanup, runs after both clocks stopped)."""
    def timed():
        before = _cpu()
        checks = run()
        after = _cpu()
        cpu.setdefault(name, []).append((after[0] - before[0], after[1] - before[1]))
        return checks
    return timed


def to_devnull(argvs, env) -> None:
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, start_new_session=True, env=env)
             for a in argvs]
    for p in procs:
        p.wait()


def _drain_pipe(fd: int) -> tuple[int, bool]:
    """Read what the pipe holds now in 64 KiB pieces: (bytes read, at EOF)."""
    got = 0
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return got, False
        if not data:
            return got, True
        got += len(data)
        if len(data) < 1 << 16:
            return got, False


def drain_only(argvs, env, polled: bool = False) -> None:
    """The pipe floor: the launcher's read pattern (pipes enlarged to 1 MiB, 64 KiB reads until
    a short one, passes 5 ms apart while output flows, up to 50 ms when quiet) with nothing done
    to the bytes. `polled`: wait in epoll on the pipes instead of reading them on a schedule."""
    import fcntl
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, env=env, start_new_session=True)
             for a in argvs]
    pipes = {p.stdout.fileno(): p.stdout for p in procs}
    selector = selectors.DefaultSelector()
    for fd in pipes:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        os.set_blocking(fd, False)
        if polled:
            selector.register(fd, selectors.EVENT_READ)
    wait = 0.005
    while pipes:
        if polled:
            ready = [key.fd for key, _ in selector.select(timeout=0.05)]
        else:
            time.sleep(wait)
            ready = list(pipes)
        busy = 0
        for fd in ready:
            got, eof = _drain_pipe(fd)
            busy += got
            if eof:
                if polled:
                    selector.unregister(fd)
                pipes.pop(fd).close()
        if polled and busy >= 16 * 1024:
            time.sleep(0.005)  # the launcher's earlier pacing of a polled reader
        wait = 0.005 if busy else min(wait * 2, 0.05)
    selector.close()
    for p in procs:
        p.wait()


def into_files(argvs, env, folder: str):
    """torchrun's `--tee` design: each rank writes its own log file (the launcher would tail it)."""
    files = [open(os.path.join(folder, f"direct_{i}.log"), "wb") for i in range(len(argvs))]
    procs = [subprocess.Popen(a, stdout=f, env=env, start_new_session=True)
             for a, f in zip(argvs, files)]
    for p, f in zip(procs, files):
        p.wait()
        f.close()
    return lambda: [os.unlink(f.name) for f in files]


def piped_into_cat(argvs, env) -> None:
    ranks = [subprocess.Popen(a, stdout=subprocess.PIPE, env=env, start_new_session=True)
             for a in argvs]
    cats = [subprocess.Popen(["cat"], stdin=p.stdout, stdout=subprocess.DEVNULL) for p in ranks]
    for proc in ranks:
        proc.stdout.close()
    for proc in ranks + cats:
        proc.wait()


def _through_launcher(code: str, nproc: int, lines: int, tmp: str, lost: list[int],
                      text_sink: bool = False, **kw):
    """The CLI's display: sys.stdout (here a UTF-8 file on /dev/null), or with `text_sink`
    a `write=` callable that takes text (a display that needs str, uncapped). Returns the
    check run after the clock: the bench's own reading and removal of the rank logs."""
    from platform_plugin import launch
    stdout = sys.stdout
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        if text_sink:
            kw["write"] = devnull.write
        else:
            sys.stdout = devnull
        try:
            result = launch([sys.executable, "-c", code], nproc=nproc, backend="plain",
                            tracking="none", log_dir=tmp, **kw)
        finally:
            sys.stdout = stdout

    def check() -> None:
        lost.append(sum(lines - Path(result.job_dir, f"rank_{r}.log").read_bytes().count(b"\n")
                        for r in range(nproc)))
        shutil.rmtree(result.job_dir, ignore_errors=True)
    return check


def free_core(tmp: str, rounds: int) -> dict:
    """One rank of FREE_CORE_LINES lines: a core stays free for the launcher, as on the
    platform's servers (8 ranks, dozens of cores). Sides: /dev/null, the pipe floor, launch()."""
    code = writer(FREE_CORE_LINES)
    argvs = [[sys.executable, "-c", code, "0"]]
    unbuffered = {**os.environ, "PYTHONUNBUFFERED": "1"}
    lost: list[int] = []
    cpu: dict = {}
    sides = {
        "devnull": lambda: to_devnull(argvs, unbuffered),
        "drain": lambda: drain_only(argvs, unbuffered),
        "launch": lambda: _through_launcher(code, 1, FREE_CORE_LINES, tmp, lost),
    }
    times = alternate({name: _with_cpu(run, cpu, name) for name, run in sides.items()}, rounds)
    cpu = {name: values[1:] for name, values in cpu.items()}
    return {"times": times, "cpu": cpu, "lost": sum(lost), "runs": len(lost)}


def throughput(tmp: str, rounds: int) -> dict:
    py = sys.executable
    writers = [[py, "-c", WRITER, str(r)] for r in range(RANKS)]
    real = [[py, "-c", REAL_WRITER, str(r)] for r in range(RANKS)]
    unbuffered = {**os.environ, "PYTHONUNBUFFERED": "1"}
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    lost: list[int] = []
    cpu: dict = {}

    def through_launcher(**kw):
        return _through_launcher(WRITER, RANKS, LINES, tmp, lost, **kw)

    sides = {
        "devnull": lambda: to_devnull(writers, unbuffered),
        "drain": lambda: drain_only(writers, unbuffered),
        "polled": lambda: drain_only(writers, unbuffered, polled=True),
        "cat": lambda: piped_into_cat(writers, unbuffered),
        "file": lambda: into_files(writers, unbuffered, tmp),
        "shm": lambda: into_files(writers, unbuffered, shm),
        "launch": through_launcher,
        "launch_text": lambda: through_launcher(text_sink=True),
        "devnull_buffered": lambda: to_devnull(writers, buffered),
        "drain_buffered": lambda: drain_only(writers, buffered),
        "launch_buffered": lambda: through_launcher(buffered=True),
        "devnull_real": lambda: to_devnull(real, unbuffered),
        "drain_real": lambda: drain_only(real, unbuffered),
        "launch_real": lambda: _through_launcher(REAL_WRITER, RANKS, LINES, tmp, lost),
    }
    shm = tempfile.mkdtemp(prefix="bench_output_", dir=SHM)
    try:
        times = alternate({name: _with_cpu(run, cpu, name) for name, run in sides.items()},
                          rounds)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    cpu = {name: values[1:] for name, values in cpu.items()}  # the warm-up is not counted
    return {"times": times, "cpu": cpu, "lost": sum(lost), "runs": len(lost)}


def _ratio(times: dict, a: str, b: str) -> float:
    return statistics.median(times[a]) / statistics.median(times[b])


def _cpu_text(cpu: dict, name: str) -> str:
    own = statistics.median(c[0] for c in cpu[name])
    ranks = statistics.median(c[1] for c in cpu[name])
    return f"{own:.2f} | {ranks:.2f}"


def section(result: dict, rounds: int, header: str) -> tuple[str, bool]:
    """The `launch-output` section of docs/benchmarks.md, and whether the goal is met."""
    t, cpu = result["times"], result["cpu"]
    r_out = _ratio(t, "launch", "devnull")
    meets = r_out <= GOAL
    rows = [
        ("devnull", "ranks unbuffered (PYTHONUNBUFFERED=1, the launcher's default) to /dev/null"),
        ("drain", "the same ranks, each piped into a reader that only drains, on the launcher's "
                  "schedule (the pipe floor)"),
        ("polled", "the same reader waiting in epoll on the pipes (the launcher's earlier design)"),
        ("cat", "the same ranks, each piped into `cat` (wakes up for every write)"),
        ("file", "the same ranks, each writing its own log file in the log folder (torchrun's "
                 "`--tee` design, before any tailing)"),
        ("shm", "the same ranks, each writing its own file in /dev/shm (tmpfs: memory, no disk)"),
        ("launch", "the same ranks through the launcher (rank logs + prefixed display on "
                   "sys.stdout, a UTF-8 file on /dev/null: the CLI's path)"),
        ("launch_text", "the same, the display through a `write=` callable that takes text "
                        "(decoded: a display that needs str, uncapped)"),
        ("devnull_buffered", "ranks with their own buffering to /dev/null"),
        ("drain_buffered", "the same, each piped into a reader that only drains"),
        ("launch_buffered", "the same through the launcher with `buffered=True` (`--buffered`)"),
    ]
    lines = [
        "### Output throughput", "",
        header, "",
        f"{RANKS} ranks x {LINES:,} lines (~58 bytes each), the same ranks with the same "
        "environment on every side; CPU seconds of the process running the side (the launcher, "
        "or the bench's own reader) and of the ranks (children):", "",
        "| what | wall seconds | ratio | CPU own | CPU ranks |", "|---|---|---|---|---|",
    ]
    for name, what in rows:
        base = "devnull_buffered" if name.endswith("_buffered") else "devnull"
        lines.append(f"| {what} | {spread(t[name], digits=2)} | {_ratio(t, name, base):.2f}x | "
                     f"{_cpu_text(cpu, name)} |")
    lines += [
        "",
        f"Launcher vs the same ranks to /dev/null: {r_out:.2f}x unbuffered (goal <= {GOAL}x: "
        f"{'meets' if meets else 'MISSES'}), {_ratio(t, 'launch_buffered', 'devnull_buffered'):.2f}x "
        f"buffered, {_ratio(t, 'launch_text', 'devnull'):.2f}x with a display that takes text; "
        f"vs the pipe floor {_ratio(t, 'launch', 'drain'):.2f}x unbuffered, "
        f"{_ratio(t, 'launch_buffered', 'drain_buffered'):.2f}x buffered; lines lost over "
        f"{result['runs']} launcher runs: {result['lost']}. Unbuffered output alone (a write per "
        f"print) costs {_ratio(t, 'devnull', 'devnull_buffered'):.2f}x — the reason for "
        "`--buffered` where live output is not needed.", "",
        *_where_the_time_goes(t, cpu), "",
        *_realistic_lines(t, cpu), "",
        *_free_core_lines(result["free_core"]),
    ]
    return "\n".join(lines), meets


def _realistic_lines(t: dict, cpu: dict) -> list[str]:
    """The second writer (bench/output_writers.realistic): not the goal's row, but what the
    chatter test, the `\\r` redraws and longer lines cost the launcher."""
    rows = [("devnull_real", "ranks unbuffered to /dev/null"),
            ("drain_real", "the same ranks piped into a reader that only drains"),
            ("launch_real", "the same ranks through the launcher (the CLI's path)")]
    return [
        f"Lines that look like a training rank's output ({RANKS} ranks x {LINES:,} lines, "
        "~91 bytes each: 40 MindSpore networking lines the display hides, logging lines with "
        "`[INFO]`/`[WARNING]`, every 50th line a tqdm-like bar redrawn 3 times with `\\r`; "
        "bench/output_writers.py), alternating with the rows above:", "",
        "| what | wall seconds | ratio | CPU own | CPU ranks |", "|---|---|---|---|---|",
        *[f"| {what} | {spread(t[name], digits=2)} | {_ratio(t, name, 'devnull_real'):.2f}x | "
          f"{_cpu_text(cpu, name)} |" for name, what in rows],
        "",
        f"Launcher vs the same ranks to /dev/null with these lines: "
        f"{_ratio(t, 'launch_real', 'devnull_real'):.2f}x (vs the pipe floor "
        f"{_ratio(t, 'launch_real', 'drain_real'):.2f}x).",
    ]


def _free_core_lines(result: dict) -> list[str]:
    """The same comparison with a core left for the launcher (the platform's shape)."""
    t, cpu = result["times"], result["cpu"]
    rows = [("devnull", "1 rank unbuffered to /dev/null"),
            ("drain", "the same rank piped into a reader that only drains (the pipe floor)"),
            ("launch", "the same rank through the launcher (the CLI's path, as above)")]
    r_out = _ratio(t, "launch", "devnull")
    return [
        f"With a core free for the launcher, as on the platform's servers (8 ranks, dozens of "
        f"cores): 1 rank x {FREE_CORE_LINES:,} lines, the same three ways:", "",
        "| what | wall seconds | ratio | CPU own | CPU ranks |", "|---|---|---|---|---|",
        *[f"| {what} | {spread(t[name], digits=2)} | {_ratio(t, name, 'devnull'):.2f}x | "
          f"{_cpu_text(cpu, name)} |" for name, what in rows],
        "",
        f"Launcher vs the same rank to /dev/null with a core to spare: {r_out:.2f}x (the "
        f"goal's {GOAL}x: {'within' if r_out <= GOAL else 'above'}); the pipe floor "
        f"{_ratio(t, 'drain', 'devnull'):.2f}x; lines lost over {result['runs']} launcher runs: "
        f"{result['lost']}. With a core of its own the rank's wall time is its own CPU, so this "
        "floor is what a `write` into a pipe costs the rank itself (the kernel's pipe_write, "
        "its lock and copy, against /dev/null's write_null): no reader, however idle, takes it "
        "away.",
    ]


def _where_the_time_goes(t: dict, cpu: dict) -> list[str]:
    """The explanation of the unbuffered ratio, from this run's CPU figures."""
    med = lambda name, i: statistics.median(c[i] for c in cpu[name])  # noqa: E731
    pipe_cost = med("drain", 1) - med("devnull", 1)
    floor = _ratio(t, "drain", "devnull")
    verdict = ("above the goal before the launcher does any work" if floor > GOAL else
               "the rest is the launcher's own work")
    return [
        f"Where the time goes (unbuffered): the ranks need {pipe_cost:.2f} s more CPU when "
        f"their stdout is a pipe instead of /dev/null ({med('devnull', 1):.2f} -> "
        f"{med('drain', 1):.2f} s with a reader that does nothing but drain: a `write` into a "
        "pipe costs the kernel more than one into /dev/null); "
        f"{med('polled', 1) - med('devnull', 1):.2f} s more when the reader waits in epoll on the "
        "pipes (a polled pipe wakes its waiters on every write since Linux 5.16: "
        "`pipe->poll_usage`), which is why the launcher reads its pipes on a schedule and polls "
        f"only the ranks' pidfds. The launcher process itself takes {med('launch', 0):.2f} s "
        "(rank logs, prefixing, display, and the job's start and end). "
        f"{RANKS} ranks already keep all {os.cpu_count()} cores of this machine busy, so every "
        "extra CPU second "
        f"shows in the wall time: the pipe floor alone is {floor:.2f}x, {verdict}. "
        f"A file is no way around it: ranks writing their own log file take "
        f"{med('file', 1):.2f} s of CPU ({_ratio(t, 'file', 'devnull'):.2f}x wall) before anything "
        f"reads it, and {med('shm', 1):.2f} s ({_ratio(t, 'shm', 'devnull'):.2f}x) even in tmpfs "
        "memory (a write into a page-cache file costs the kernel more than one into a pipe).",
    ]
