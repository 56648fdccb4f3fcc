"""Launcher benchmarks, product and baseline side by side in one run.

    .venv/bin/python bench/launch.py [--repeat 5] [--with-msrun] [--no-write]

1. launch overhead, 8 no-op Python ranks: launch() in-process (what %dist_run does) vs a bare
   parallel Popen (the limit); `platform-run launch` vs `torchrun --standalone` (both CLIs).
2. output throughput, 4 ranks x 250,000 lines through the launcher (logs + prefixed display
   to /dev/null) vs the same ranks writing to /dev/null; every line counted in the logs.
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

from benchdoc import write_section  # bench/benchdoc.py

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


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(fn, repeat: int) -> float:
    fn()  # warm the page cache
    return statistics.median(timed(fn) for _ in range(repeat))


def bare_spawn(argvs) -> None:
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL) for a in argvs]
    for p in procs:
        p.wait()


def overhead(tmp: str, repeat: int) -> dict:
    script = Path(tmp, "noop.py")
    script.write_text("pass\n")
    noop = [PY, str(script)]
    quiet = dict(tracking="none", show="none", log_dir=tmp, write=lambda s: None)
    cli = [str(BIN / "platform-run"), "launch", "--nproc", "8", "--tracking", "none", "--show",
           "none", "--log-dir", tmp, "--backend", "plain", "--", *noop]
    torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "8", str(script)]
    run = lambda argv: subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      check=True)
    return {
        "bare": median(lambda: bare_spawn([noop] * 8), repeat),
        "launch": median(lambda: launch(noop, nproc=8, backend="plain", **quiet), repeat),
        "cli": median(lambda: run(cli), repeat),
        "torchrun": median(lambda: run(torchrun), repeat),
    }


def throughput(tmp: str, repeat: int) -> dict:
    runs = [_throughput_once(tmp) for _ in range(repeat)]
    return {"baseline": statistics.median(r["baseline"] for r in runs),
            "launch": statistics.median(r["launch"] for r in runs),
            "cat": statistics.median(r["cat"] for r in runs),
            "lost": sum(r["lost"] for r in runs), "runs": len(runs)}


def piped_into_cat() -> None:
    """The floor for any launcher that captures output: each rank piped into `cat`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # as under the launcher: live output
    ranks = [subprocess.Popen([PY, "-c", WRITER, str(r)], stdout=subprocess.PIPE, env=env)
             for r in range(4)]
    cats = [subprocess.Popen(["cat"], stdin=p.stdout, stdout=subprocess.DEVNULL) for p in ranks]
    for p in ranks:
        p.stdout.close()
    for p in ranks + cats:
        p.wait()


def _throughput_once(tmp: str) -> dict:
    baseline = timed(lambda: bare_spawn([[PY, "-c", WRITER, str(r)] for r in range(4)]))
    cat = timed(piped_into_cat)
    with open(os.devnull, "w") as devnull:
        result = None

        def product():
            nonlocal result
            result = launch([PY, "-c", WRITER], nproc=4, backend="plain", tracking="none",
                            log_dir=tmp, write=devnull.write)
        ours = timed(product)
    lost = 0
    for r in range(4):
        with open(f"{result.job_dir}/rank_{r}.log", "rb") as fh:
            lost += 250000 - fh.read().count(b"\n")
    return {"baseline": baseline, "cat": cat, "launch": ours, "lost": lost}


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--with-msrun", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_launch_")
    try:
        o = overhead(tmp, args.repeat)
        t = throughput(tmp, args.repeat)
        d_term = death(tmp, "term", 3.0)
        d_ignore = death(tmp, "ignore", 3.0)
        ms = msrun_death(tmp) if args.with_msrun else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r_bare, r_torch = o["launch"] / o["bare"], o["cli"] / o["torchrun"]
    r_out = t["launch"] / t["baseline"]
    ms_text = (f"{ms:.1f} s measured in this run" if ms is not None else
               "not run this time (`--with-msrun`); earlier measurement on this machine: "
               "46–48 s (from the issue, not re-measured here)")
    lines = [
        "## launch", "",
        f"Command: `.venv/bin/python bench/launch.py{' --with-msrun' if args.with_msrun else ''}`"
        f" — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 2-core VM shared with other "
        "test runs (noisy: read ratios, not absolute numbers).", "",
        f"Launch overhead, 8 no-op Python ranks, median of {args.repeat}:", "",
        "| what | seconds |", "|---|---|",
        f"| bare parallel Popen (the limit) | {o['bare']:.3f} |",
        f"| `platform_plugin.launch()` in-process (as `%dist_run`) | {o['launch']:.3f} |",
        f"| `platform-run launch` CLI | {o['cli']:.3f} |",
        f"| `torchrun --standalone --nproc-per-node 8` | {o['torchrun']:.3f} |", "",
        f"launch()/bare = {r_bare:.2f}x (goal <= 1.2x: {'meets' if r_bare <= 1.2 else 'MISSES'}); "
        f"CLI/torchrun = {r_torch:.2f}x (goal <= 0.5x: {'meets' if r_torch <= 0.5 else 'MISSES'}).",
        "",
        f"Output throughput, 4 ranks x 250,000 lines (~58 bytes each), median of {t['runs']}:",
        "",
        "| what | seconds |", "|---|---|",
        f"| ranks writing to /dev/null | {t['baseline']:.2f} |",
        f"| reference: each rank piped into `cat` (a pipe + a reader, PYTHONUNBUFFERED=1) | "
        f"{t['cat']:.2f} |",
        f"| through the launcher (rank logs + prefixed display to /dev/null) | {t['launch']:.2f} |",
        "",
        f"ratio {r_out:.2f}x (goal <= 1.5x: {'meets' if r_out <= 1.5 else 'MISSES'}); "
        f"lines lost over all runs: {t['lost']}. Launcher / piped-into-cat = "
        f"{t['launch'] / t['cat']:.2f}x.", "",
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
