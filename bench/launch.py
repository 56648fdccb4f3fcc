"""Launcher benchmarks, product and baseline side by side in one run.

    .venv/bin/python bench/launch.py [--rounds 5] [--with-msrun] [--no-write]

1. launch overhead, 8 no-op Python ranks: launch() in-process (what %dist_run does) vs a bare
   parallel Popen (the limit); `platform-run launch` vs `torchrun --standalone` (both CLIs).
2. output throughput, 4 ranks x 250,000 lines through the launcher (logs + prefixed display
   to /dev/null) vs the same ranks with the same environment writing to /dev/null, unbuffered
   (the launcher's default) and with the ranks' own buffering (`buffered=True`); every line
   counted in the logs.
3. rank death -> job stopped: a rank exits 1, the others would run 10 min (once dying on
   SIGTERM, once ignoring it = grace); `--with-msrun`: the same with `msrun --join` (~50 s).
Results go to docs/benchmarks.md between the bench:launch markers.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import alternate, load_text, spread, write_section  # bench/benchdoc.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from platform_plugin import JobFailed, launch  # noqa: E402

PY = sys.executable
BIN = Path(PY).parent
WRITER = ("import os,sys\nr=int(os.environ.get('RANK_ID') or sys.argv[1])\nw=sys.stdout.write\n"
          "for i in range(250000): w(f'rank {r} line {i} ' + 'x'*40 + '\\n')\n")
DIE = ("import os,signal,sys,time\nr=int(os.environ['RANK_ID'])\n"
       "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
       "time.sleep(2)\n"
       "if r == 1:\n    print('DIED', time.time(), flush=True); sys.exit(1)\ntime.sleep(600)\n")


def bare_spawn(argvs, env=None) -> None:
    """The limit: a parallel Popen loop. Own sessions, as the launcher's ranks (under the kernel's
    autogroup scheduling a session is a scheduling group: on a loaded machine both sides then
    get the same share of the CPU)."""
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, start_new_session=True, env=env)
             for a in argvs]
    for p in procs:
        p.wait()


def overhead(tmp: str, rounds: int) -> dict:
    script = Path(tmp, "noop.py")
    script.write_text("pass\n")
    noop = [PY, str(script)]
    quiet = dict(tracking="none", show="none", log_dir=tmp, write=lambda s: None)
    cli = [str(BIN / "platform-run"), "launch", "--nproc", "8", "--tracking", "none", "--show",
           "none", "--log-dir", tmp, "--backend", "plain", "--", *noop]
    torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "8", str(script)]
    run = lambda argv: subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      check=True)
    return alternate({
        "bare": lambda: bare_spawn([noop] * 8),
        "launch": lambda: launch(noop, nproc=8, backend="plain", **quiet),
        "cli": lambda: run(cli),
        "torchrun": lambda: run(torchrun),
    }, rounds)


def throughput(tmp: str, rounds: int) -> dict:
    """The same 4 writer ranks four ways, alternating: to /dev/null unbuffered (the environment
    the launcher gives its ranks: PYTHONUNBUFFERED=1) and buffered, and through the launcher
    both ways (`buffered=True` keeps the ranks' own buffering)."""
    writers = [[PY, "-c", WRITER, str(r)] for r in range(4)]
    unbuffered = {**os.environ, "PYTHONUNBUFFERED": "1"}
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    lost = []

    def through_launcher(**kw):
        with open(os.devnull, "w") as devnull:
            result = launch([PY, "-c", WRITER], nproc=4, backend="plain", tracking="none",
                            log_dir=tmp, write=devnull.write, **kw)
        lost.append(sum(250000 - Path(result.job_dir, f"rank_{r}.log").read_bytes().count(b"\n")
                        for r in range(4)))
        shutil.rmtree(result.job_dir, ignore_errors=True)

    def piped_into_cat():
        """The floor for anything that captures output: each rank piped into `cat`."""
        ranks = [subprocess.Popen(w, stdout=subprocess.PIPE, env=unbuffered, start_new_session=True)
                 for w in writers]
        cats = [subprocess.Popen(["cat"], stdin=p.stdout, stdout=subprocess.DEVNULL) for p in ranks]
        for proc in ranks:
            proc.stdout.close()
        for proc in ranks + cats:
            proc.wait()

    times = alternate({
        "devnull": lambda: bare_spawn(writers, unbuffered),
        "cat": piped_into_cat,
        "launch": through_launcher,
        "devnull_buffered": lambda: bare_spawn(writers, buffered),
        "launch_buffered": lambda: through_launcher(buffered=True),
    }, rounds)
    return {**times, "lost": sum(lost), "runs": len(lost)}


def death(tmp: str, mode: str, grace: float) -> float:
    try:
        result = launch([PY, "-c", DIE, mode], nproc=4, backend="plain", tracking="none",
                        log_dir=tmp, grace=grace, show="none", write=lambda s: None)
    except JobFailed as exc:
        ended = time.time()
        result = exc.result
    else:
        raise RuntimeError("the job should have failed")
    text = Path(result.job_dir, "rank_1.log").read_text()
    died = float(re.search(r"DIED (\S+)", text).group(1))
    return ended - died


def msrun_death(tmp: str) -> float | None:
    """msrun --join with a MindSpore job whose rank 1 dies after init()."""
    script = Path(tmp, "ms_die.py")
    script.write_text("import os,sys,time\nimport mindspore as ms\n"
                      "from mindspore.communication import init, get_rank\n"
                      "ms.set_context(device_target='CPU')\ninit()\n"
                      "if get_rank() == 1:\n    print('DIED', time.time(), flush=True); sys.exit(1)\n"
                      "time.sleep(600)\n")
    from platform_plugin.util.ports import free_port
    argv = [str(BIN / "msrun"), "--worker_num", "2", "--local_worker_num", "2", "--master_port",
            str(free_port()), "--join", "True", "--log_dir", str(Path(tmp, "msrun_logs")),
            str(script)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # msrun runs "python"
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=tmp, start_new_session=True, env=env)
    try:
        proc.wait(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        return None
    ended = time.time()
    logs = " ".join(p.read_text(errors="replace") for p in Path(tmp, "msrun_logs").glob("*.log"))
    found = re.search(r"DIED (\S+)", logs)
    return ended - float(found.group(1)) if found else None


def ratio(times: dict, a: str, b: str) -> float:
    return statistics.median(times[a]) / statistics.median(times[b])


def verdict(value: float, goal: float) -> str:
    return f"goal <= {goal}x: {'meets' if value <= goal else 'MISSES'}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--with-msrun", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_before = load_text()
    tmp = tempfile.mkdtemp(prefix="bench_launch_")
    try:
        o = overhead(tmp, args.rounds)
        t = throughput(tmp, args.rounds)
        d_term = death(tmp, "term", 3.0)
        d_ignore = death(tmp, "ignore", 3.0)
        ms = msrun_death(tmp) if args.with_msrun else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r_bare, r_torch = ratio(o, "launch", "bare"), ratio(o, "cli", "torchrun")
    r_out, r_out_buf = ratio(t, "launch", "devnull"), ratio(t, "launch_buffered", "devnull_buffered")
    r_unbuf = ratio(t, "devnull", "devnull_buffered")
    ms_text = (f"{ms:.1f} s measured in this run" if ms is not None else
               "not run this time (`--with-msrun`)")
    lines = [
        "## launch", "",
        f"Command: `.venv/bin/python bench/launch.py --rounds {args.rounds}"
        f"{' --with-msrun' if args.with_msrun else ''}` — "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load_before} at the start, "
        f"{load_text()} at the end. Sides alternate every round; median (min–max) of "
        f"{args.rounds} rounds after one warm-up each.", "",
        "Launch overhead, 8 no-op Python ranks:", "",
        "| what | seconds |", "|---|---|",
        f"| bare parallel Popen (the limit) | {spread(o['bare'])} |",
        f"| `platform_plugin.launch()` in-process (as `%dist_run`) | {spread(o['launch'])} |",
        f"| `platform-run launch` CLI | {spread(o['cli'])} |",
        f"| `torchrun --standalone --nproc-per-node 8` | {spread(o['torchrun'])} |", "",
        f"launch()/bare = {r_bare:.2f}x ({verdict(r_bare, 1.2)}); "
        f"CLI/torchrun = {r_torch:.2f}x ({verdict(r_torch, 0.5)}).", "",
        "Output throughput, 4 ranks x 250,000 lines (~58 bytes each), the same ranks with the "
        "same environment on both sides:", "",
        "| what | seconds |", "|---|---|",
        f"| ranks unbuffered (PYTHONUNBUFFERED=1, the launcher's default) to /dev/null | "
        f"{spread(t['devnull'], digits=2)} |",
        f"| the same ranks, each piped into `cat` (the floor for capturing output) | "
        f"{spread(t['cat'], digits=2)} |",
        f"| the same ranks through the launcher (rank logs + prefixed display to /dev/null) | "
        f"{spread(t['launch'], digits=2)} |",
        f"| ranks with their own buffering to /dev/null | {spread(t['devnull_buffered'], digits=2)} |",
        f"| the same through the launcher with `buffered=True` (`--buffered`) | "
        f"{spread(t['launch_buffered'], digits=2)} |", "",
        f"Launcher vs the same ranks: {r_out:.2f}x unbuffered ({verdict(r_out, 1.2)}), "
        f"{r_out_buf:.2f}x buffered; launcher vs piped into `cat` "
        f"{ratio(t, 'launch', 'cat'):.2f}x; lines lost over {t['runs']} launcher runs: {t['lost']}. "
        f"The cost of unbuffered output alone (a write per print): {r_unbuf:.2f}x — the reason "
        "for `--buffered` where live output is not needed.", "",
        "Rank death -> job stopped (launch() returned), 4 ranks, grace 3 s:", "",
        "| what | seconds |", "|---|---|",
        f"| others die on SIGTERM | {d_term:.2f} |",
        f"| others ignore SIGTERM (SIGKILL after grace) | {d_ignore:.2f} |",
        f"| `msrun --join`, 2 MindSpore ranks | {ms_text} |", "",
        f"goal <= grace + 0.5 s = 3.5 s: {'meets' if max(d_term, d_ignore) <= 3.5 else 'MISSES'}.",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("launch", text)


if __name__ == "__main__":
    main()
