"""A/B of start-up between two checkouts of this package, the sides alternating in one run:
the imports of `platform-run --help` and `platform-run launch --help` (the sum of the top-level
cumulative times of `python -X importtime`, as bench/imports.py), and `platform-run launch
--tracking none` of 8 no-op ranks end to end against the bare Python script that Popens the same
ranks (as bench/launch.py), and that launch ended at its first spawn (the launcher's own
start-up, without the ranks). Both packages are compiled copies (bench/pkgcopy.py).

    .venv/bin/python bench/startup_ab.py --a /path/to/other/checkout [--rounds 15] [--no-write]

Every round runs every case on side a, then on side b (the order swapped every other round), so a
noisy machine's slow phase hurts both alike; ratios are b / a per round, then the median. The
results go to docs/benchmarks.md between the bench:startup-ab markers.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import load_text, write_section  # bench/benchdoc.py
from imports import measure  # bench/imports.py: one interpreter's import time
from launch import BARE_SCRIPT, NPROC  # bench/launch.py: the CLI's baseline
from pkgcopy import compiled_package, env_for  # bench/pkgcopy.py

HELP = "from platform_plugin.cli import main\ntry: main({argv!r})\nexcept SystemExit: pass"
# the same launch ended at its first spawn (the lifeline's, before any rank), at once and with
# nothing cleaned up: the launcher's own start-up alone, without the ranks' CPU and their noise
UNTIL_SPAWN = ("import os, sys\n"
               "def stop(event, args):\n    if event == 'subprocess.Popen': os._exit(0)\n"
               "sys.addaudithook(stop)\nfrom platform_plugin.cli import main\nmain({argv!r})")
BIN = Path(sys.executable).parent


def wall(argv: list[str], env: dict | None, cwd: str) -> float:
    """Seconds of `argv` run in `cwd` (not the checkout: `python -c` would import its sources)."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env,
                   cwd=cwd)
    return time.perf_counter() - start


def with_cpu(call) -> tuple[float, float]:
    """(what `call()` returns, CPU seconds of the processes it ran: user + sys, the load
    stretches it far less than wall time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    value = call()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return value, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def run(a: Path, rounds: int, tmp: str) -> dict[str, dict[str, list[float]]]:
    """{case: {"a": [...], "b": [...]}}: ms of imports, seconds of wall, and "<case> cpu":
    CPU seconds of the case's process tree."""
    Path(tmp, "noop.py").write_text("pass\n")
    Path(tmp, "bare.py").write_text(BARE_SCRIPT)
    noop = [sys.executable, str(Path(tmp, "noop.py"))]
    cli = [str(BIN / "platform-run"), "launch", "--nproc", str(NPROC), "--tracking", "none",
           "--show", "none", "--log-dir", tmp, "--backend", "plain", "--", *noop]
    bare = [sys.executable, str(Path(tmp, "bare.py")), str(NPROC), *noop]
    until_spawn = [sys.executable, "-c", UNTIL_SPAWN.format(argv=cli[1:])]
    cases: dict[str, dict[str, list[float]]] = {}
    with compiled_package(a) as path_a, compiled_package() as path_b:
        envs = {"a": env_for(path_a), "b": env_for(path_b)}
        for round_no in range(rounds + 1):  # round 0: a warm-up, not counted
            for side in ("a", "b") if round_no % 2 else ("b", "a"):
                env = envs[side]
                got = {}
                for case, call in (
                        ("--help", lambda: measure(HELP.format(argv=["--help"]), env)[0]),
                        ("launch --help",
                         lambda: measure(HELP.format(argv=["launch", "--help"]), env)[0]),
                        ("bare", lambda: wall(bare, None, tmp)),
                        ("launch", lambda: wall(cli, env, tmp)),
                        ("until spawn", lambda: wall(until_spawn, env, tmp))):
                    got[case], got[f"{case} cpu"] = with_cpu(call)
                if round_no:
                    for case, value in got.items():
                        cases.setdefault(case, {"a": [], "b": []})[side].append(value)
    return cases


def med(values: list[float]) -> float:
    return statistics.median(values)


def section(cases: dict, a: Path, rounds: int, load_before: str) -> str:
    def ms(case: str, side: str) -> str:
        v, digits = cases[case][side], 3 if case.endswith("cpu") or "help" not in case else 1
        return f"{med(v):.{digits}f} ({min(v):.{digits}f}–{max(v):.{digits}f})"

    def ratio(case: str) -> str:
        return f"{med([b / a for a, b in zip(cases[case]['a'], cases[case]['b'])]):.2f}x"

    def over_bare(side: str, cpu: str = "") -> str:
        pairs = zip(cases["launch" + cpu][side], cases["bare" + cpu][side])
        return f"{med([cli / bare for cli, bare in pairs]):.2f}x"
    rows = ["| case | a: the other checkout | b: this one | b / a per round, median |",
            "|---|---|---|---|"]
    for case in ("--help", "launch --help"):
        rows.append(f"| `platform-run {case}`, ms of imports | {ms(case, 'a')} | "
                    f"{ms(case, 'b')} | {ratio(case)} |")
        rows.append(f"| the same, CPU s of the process | {ms(case + ' cpu', 'a')} | "
                    f"{ms(case + ' cpu', 'b')} | {ratio(case + ' cpu')} |")
    for case, what in (("launch", f"`platform-run launch --tracking none`, {NPROC} no-op ranks"),
                       ("bare", "the bare script that Popens the same ranks (its runs next to "
                                "each side's)")):
        rows.append(f"| {what}, wall s | {ms(case, 'a')} | {ms(case, 'b')} | {ratio(case)} |")
        rows.append(f"| the same, CPU s of the process tree | {ms(case + ' cpu', 'a')} | "
                    f"{ms(case + ' cpu', 'b')} | {ratio(case + ' cpu')} |")
    rows.append(f"| the same launch ended at its first spawn (the launcher's start-up alone), "
                f"wall s | {ms('until spawn', 'a')} | {ms('until spawn', 'b')} | "
                f"{ratio('until spawn')} |")
    rows.append(f"| the same, CPU s of the process | {ms('until spawn cpu', 'a')} | "
                f"{ms('until spawn cpu', 'b')} | {ratio('until spawn cpu')} |")
    rows.append(f"| launch / the bare script run next to it, wall, per round, median | "
                f"{over_bare('a')} | {over_bare('b')} | |")
    rows.append(f"| the same for the CPU of the process trees | {over_bare('a', ' cpu')} | "
                f"{over_bare('b', ' cpu')} | |")
    return "\n".join([
        "## startup-ab", "",
        f"Command: `.venv/bin/python bench/startup_ab.py --a <checkout> --rounds {rounds}`, "
        f"a = {a.name}, b = this checkout — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{load_before} at the start, {load_text()} at the end (2 cores shared with other "
        "jobs: absolute times grow with the load, the per-round ratios are what count). Each "
        "round runs every case on both sides, their order swapped every other round; median "
        "(min–max) of the rounds after one warm-up round.", "", *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="the other checkout (its root)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_before = load_text()
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        cases = run(args.a.resolve(), args.rounds, tmp)
    text = section(cases, args.a.resolve(), args.rounds, load_before)
    print(text)
    if not args.no_write:
        write_section("startup-ab", text)


if __name__ == "__main__":
    main()
