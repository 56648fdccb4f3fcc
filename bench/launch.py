"""Launcher benchmarks, product and baseline side by side in one run.

    .venv/bin/python bench/launch.py [--rounds 5] [--with-msrun] [--no-write]

1. launch overhead, 8 no-op Python ranks (`--only launch` runs 1 and 2):
   - `platform-run launch --tracking none` as its own process vs a bare Python script, run as
     its own process, that Popens the same 8 ranks in parallel and waits (interpreter start
     on both sides), from a compiled copy of the package (bench/pkgcopy.py: its .pyc, as an
     install has them); and vs `torchrun --standalone`;
   - launch() in-process (what %dist_run does) vs a bare parallel Popen in the same process,
     the two alone, alternating (nothing else runs between them), and the launcher's own CPU
     time per launch() (what the ranks do not pay for).
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
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import alternate, load_text, spread, write_section  # bench/benchdoc.py
import launch_output  # bench/launch_output.py: the output part
from pkgcopy import compiled_package, env_for  # bench/pkgcopy.py
from launch_path import split_by_spawn  # bench/launch_path.py

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


# The baseline of the CLI: a bare Python script, its own process, that Popens the ranks in
# parallel (own sessions, as the launcher's ranks) and waits.
BARE_SCRIPT = """import subprocess, sys
procs = [subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, start_new_session=True)
         for _ in range(int(sys.argv[1]))]
for p in procs:
    p.wait()
"""
NPROC = 8


def cli_overhead(tmp: str, rounds: int) -> dict:
    """The CLI and the bare script, each its own process (the CLI from a compiled copy of the
    package); torchrun as the other CLI."""
    script = Path(tmp, "noop.py")
    script.write_text("pass\n")
    bare = Path(tmp, "bare_popen.py")
    bare.write_text(BARE_SCRIPT)
    noop = [PY, str(script)]
    cli = [str(BIN / "platform-run"), "launch", "--nproc", str(NPROC), "--tracking", "none",
           "--show", "none", "--log-dir", tmp, "--backend", "plain", "--", *noop]
    torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(NPROC), str(script)]

    cpu: dict[str, list[float]] = {}

    def run(name, argv, env=None):
        def side() -> None:  # CPU of the whole process tree (the ranks too): load-robust
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True, env=env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.setdefault(name, []).append(after.ru_utime + after.ru_stime
                                            - before.ru_utime - before.ru_stime)
        return side
    with compiled_package() as path:
        sides = {"bare_script": run("bare_script", [PY, str(bare), str(NPROC), *noop]),
                 "cli": run("cli", cli, env_for(path))}
        sides["torchrun"] = run("torchrun", torchrun)
        times = alternate(sides, rounds)
    return {**times, "cpu": {name: values[1:] for name, values in cpu.items()}}


def overhead_lines(o: dict, r_cli: float, r_bare: float, r_torch: float) -> list[str]:
    """The launch-overhead part of the section: tables, one verdict per goal, and where the
    time goes (CPU of each side: the machine's load hardly changes it)."""
    cpu = {name: statistics.median(values) for name, values in o["cpu"].items()}
    extra = cpu["cli"] - cpu["bare_script"]
    launcher_ms = statistics.median(o["launcher_cpu"]) * 1000
    return [
        f"Launch overhead, {NPROC} no-op Python ranks.", "",
        "The CLI and its baseline, each its own process (the interpreter's start on both "
        "sides):", "",
        "| what | wall, seconds | ratio to the bare script | CPU of the process tree |",
        "|---|---|---|---|",
        f"| bare Python script that Popens the {NPROC} ranks in parallel and waits | "
        f"{spread(o['bare_script'])} | 1.00x | {cpu['bare_script']:.3f} s |",
        f"| `platform-run launch --tracking none` CLI (compiled package) | {spread(o['cli'])} | "
        f"{r_cli:.2f}x | {cpu['cli']:.3f} s |",
        f"| `torchrun --standalone --nproc-per-node {NPROC}` | {spread(o['torchrun'])} | "
        f"{statistics.median(o['torchrun']) / statistics.median(o['bare_script']):.2f}x | "
        f"{cpu['torchrun']:.3f} s |", "",
        f"CLI / bare script = {r_cli:.2f}x ({verdict(r_cli, 1.5)}); "
        f"CLI / torchrun = {r_torch:.2f}x "
        f"({verdict(r_torch, 0.5)}).", "",
        _where_cli_time_goes(extra, launcher_ms), "",
        "In-process, as `%dist_run` runs it: the two sides alone in this process, alternating "
        "(no other side between them):", "",
        "| what | seconds |", "|---|---|",
        f"| bare parallel Popen (the limit) | {spread(o['bare'])} |",
        f"| `platform_plugin.launch()` | {spread(o['launch'])} |", "",
        f"launch() / bare = {r_bare:.2f}x ({verdict(r_bare, 1.2)}); the launcher's own CPU per "
        f"launch(): {launcher_ms:.0f} ms (settings, plan, checks, job folder and job.json, the "
        "lifeline, the spawn calls, reading the pipes, the end-of-job sweep for strays).", "",
        "Measured fairly: both sides in one process, alone and alternating, with 3x the rounds "
        "of the CLI part. The launch-scale section times each side in a fresh interpreter instead; run at the "
        "same time the two methods gave the same ratio (1.3x both, at load 4-10), and the "
        "first launch() of an interpreter costs no more than the next ones, so a gap between "
        "the two sections comes from their different runs (load, 3 rounds), not the method. "
        "The launcher's CPU per launch() is the figure the load hardly moves: on 2 cores with "
        "8 busy ranks it adds to the wall time about half of itself, plus the serial steps "
        "before the first spawn (settings, plan, the folder checks) and after the last exit "
        "(the sweep, job.json).", "",
    ]


def _where_cli_time_goes(extra: float, launcher_ms: float) -> str:
    """The paragraph under the CLI table: the extra CPU and the imports on each side of the first
    spawn (module counts and lines from this run)."""
    path = split_by_spawn(NPROC)
    (n_before, l_before), (n_after, l_after) = path["before"], path["after"]
    return (
        f"Where the CLI's time goes: its process tree used {extra * 1000:.0f} ms more CPU than "
        f"the bare script's (the ranks are the same on both sides). Of that, about "
        f"{launcher_ms:.0f} ms is the launch itself (the in-process figure below); the rest is "
        f"the interpreter running the imports: {n_before} package modules (~{l_before:,} lines) "
        f"before the first rank starts, {n_after} (~{l_after:,} lines: supervisor, output, "
        "result, job.json, the sweep) once the ranks run, and the stdlib modules the bare "
        "script does not load. The bare script imports only subprocess and makes neither a job "
        "folder nor a lifeline.")


def inprocess_overhead(tmp: str, rounds: int) -> dict:
    """launch() and a bare parallel Popen in this process, the two alone and alternating, with
    the launcher's own CPU time per launch() (process time: the ranks are not in it)."""
    script = Path(tmp, "noop.py")
    script.write_text("pass\n")
    noop = [PY, str(script)]
    cpu: list[float] = []

    def one_launch() -> None:
        start = time.process_time()
        launch(noop, nproc=NPROC, backend="plain", tracking="none", show="none", log_dir=tmp,
               write=lambda s: None)
        cpu.append(time.process_time() - start)
    times = alternate({"bare": lambda: bare_spawn([noop] * NPROC), "launch": one_launch}, rounds)
    return {**times, "launcher_cpu": cpu[1:]}  # the warm-up call is not counted


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
        result["free_core"] = launch_output.free_core(tmp, args.rounds)
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
        o = cli_overhead(tmp, args.rounds)
        o.update(inprocess_overhead(tmp, 3 * args.rounds))  # cheap: more rounds, less noise
        d_term = death(tmp, "term", 3.0)
        d_ignore = death(tmp, "ignore", 3.0)
        ms = msrun_death(tmp) if args.with_msrun else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r_bare = ratio(o, "launch", "bare")
    r_cli = ratio(o, "cli", "bare_script")
    r_torch = ratio(o, "cli", "torchrun")
    ms_text = (f"{ms:.1f} s measured in this run" if ms is not None else
               "not run this time (`--with-msrun`)")
    header = (f"Command: `.venv/bin/python bench/launch.py{_only(args)} --rounds {args.rounds}"
              f"{' --with-msrun' if args.with_msrun else ''}` — "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load_before} at the start, "
              f"{load_text()} at the end (a shared machine: other work ran alongside). Sides "
              "alternate every round; median (min–max) after one warm-up each.")
    lines = ["## launch", "", header, "", *overhead_lines(o, r_cli, r_bare, r_torch),
        "Rank death -> job stopped (launch() returned), 4 ranks, grace 3 s:", "",
        "| what | seconds |", "|---|---|",
        f"| others die on SIGTERM | {d_term:.2f} |",
        f"| others ignore SIGTERM (SIGKILL after grace) | {d_ignore:.2f} |",
        f"| `msrun --join`, 2 MindSpore ranks | {ms_text} |", "",
        f"Rank death -> job stopped: goal <= grace + 0.5 s = 3.5 s: {'meets' if max(d_term, d_ignore) <= 3.5 else 'MISSES'}.",
    ]
    text = "\n".join(lines)
    print(text)
    print(f"launch: CLI / bare script <= 1.5x: {verdict(r_cli, 1.5)}; "
          f"launch() / bare Popen <= 1.2x: {verdict(r_bare, 1.2)}")
    if not args.no_write:
        write_section("launch", text)


if __name__ == "__main__":
    main()
