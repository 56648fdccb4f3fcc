"""Launcher benchmarks, product and baseline side by side in one run.

    .venv/bin/python bench/launch.py [--rounds 5] [--with-msrun] [--no-write]

1. launch overhead, 8 no-op Python ranks: launch() in-process (what %dist_run does) vs a bare
   parallel Popen (the limit); `platform-run launch` vs `torchrun --standalone` (both CLIs).
2. rank death -> job stopped: a rank exits 1, the others would run 10 min (once dying on
   SIGTERM, once ignoring it = grace); `--with-msrun`: the same with `msrun --join` (~50 s).
3. output throughput (`--only output` runs just this part), 4 ranks x 250,000 lines through
   the launcher (logs + prefixed display to /dev/null) vs the same ranks with the same
   environment writing to /dev/null, unbuffered (the launcher's default) and with the ranks'
   own buffering (`buffered=True`); the floors of capturing through a pipe; CPU of the
   launcher process and of the ranks; every line counted in the logs.
Results go to docs/benchmarks.md between the bench:launch markers (1, 2) and the
bench:launch-output markers (3).
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
import launch_output  # bench/launch_output.py: the output part

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from platform_plugin import JobFailed, launch  # noqa: E402

PY = sys.executable
BIN = Path(PY).parent
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
    parser.add_argument("--only", choices=("launch", "output"),
                        help="run one part: launch overhead + rank death, or output throughput")
    args = parser.parse_args()
    if args.only != "output":
        launch_part(args)
    if args.only != "launch":
        output_part(args)


def _only(args) -> str:
    return f" --only {args.only}" if args.only else ""


def _shared() -> str:
    """Said when other work ran beside the bench: then the ratios count, not the seconds."""
    busy = os.getloadavg()[0] > (os.cpu_count() or 1)
    return (" (the cores were shared with other jobs: absolute times are noisy, the ratios of "
            "alternating runs are what count)") if busy else ""


def output_part(args) -> None:
    """Output throughput (bench/launch_output.py), its own section after the launch one."""
    load_before = load_text()
    tmp = tempfile.mkdtemp(prefix="bench_output_")
    try:
        result = launch_output.throughput(tmp, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    header = (f"Command: `.venv/bin/python bench/launch.py{_only(args)} --rounds {args.rounds}` "
              f"— {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"{load_before} at the start, {load_text()} at the end{_shared()}. Sides alternate "
              f"every round; median (min–max) of {args.rounds} rounds after one warm-up each.")
    text, meets = launch_output.section(result, args.rounds, header)
    print(text)
    print(f"output: launcher vs the same ranks to /dev/null <= {launch_output.GOAL}x: "
          f"{'meets' if meets else 'MISSES'}")
    if not args.no_write:
        write_section("launch-output", text)


def launch_part(args) -> None:
    load_before = load_text()
    tmp = tempfile.mkdtemp(prefix="bench_launch_")
    try:
        o = overhead(tmp, args.rounds)
        d_term = death(tmp, "term", 3.0)
        d_ignore = death(tmp, "ignore", 3.0)
        ms = msrun_death(tmp) if args.with_msrun else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r_bare, r_torch = ratio(o, "launch", "bare"), ratio(o, "cli", "torchrun")
    ms_text = (f"{ms:.1f} s measured in this run" if ms is not None else
               "not run this time (`--with-msrun`)")
    lines = [
        "## launch", "",
        f"Command: `.venv/bin/python bench/launch.py{_only(args)} --rounds {args.rounds}"
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
