"""Import cost of what runs often: `import platform_plugin.tracking` inside every rank, and
`platform-run --help` / `platform-run launch --help` / `platform-run launch` at the terminal.

    python bench/imports.py [--rounds 7] [--no-write]

Each case runs in a fresh interpreter with `python -X importtime`, from a compiled copy of the
package (bench/pkgcopy.py: a pip or wheel install compiles its .pyc, and so does an image). The
number is the sum of the top-level cumulative import times (microseconds -> ms; the
interpreter's own start-up is not in it): median and minimum of the rounds, and the count of
platform_plugin modules and of all modules loaded. The results go to docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdoc import load_text, write_section  # noqa: E402
from pkgcopy import compiled_package, env_for  # noqa: E402

_MAIN = "from platform_plugin.cli import main\ntry: main({argv!r})\nexcept SystemExit: pass"
_LAUNCH = ["launch", "--nproc", "1", "--tracking", "none", "--backend", "plain", "--show", "none",
           "--log-dir", "LOG_DIR", "--", sys.executable, "-c", "pass"]
# stops the launch at its first spawn (the lifeline's, before any rank): the imports until then
_BEFORE_SPAWN = ("class Spawned(BaseException): pass\n"
                 "def _hook(event, args):\n"
                 "    if event == 'subprocess.Popen': raise Spawned\n"
                 "sys.addaudithook(_hook)\n")
CASES = {
    "a rank: `from platform_plugin.tracking import get_tracker`":
        "from platform_plugin.tracking import get_tracker",
    "`platform-run --help`": _MAIN.format(argv=["--help"]),
    "`platform-run launch --help`": _MAIN.format(argv=["launch", "--help"]),
    "`platform-run launch --tracking none` of one no-op rank (all it imports)":
        _MAIN.format(argv=_LAUNCH),
    # spawn first: what delays the first rank
    "the same launch, what it imports before its first process is spawned":
        _BEFORE_SPAWN + _MAIN.format(argv=_LAUNCH).replace("SystemExit", "(SystemExit, Spawned)"),
}
# Where the launch's import time goes: the value classes the launch path defines, each
# @dataclasses.dataclass compiling its generated methods (__init__, __repr__, __eq__, ...) when
# its module is imported. The wrapper times dataclasses' own class processing.
_DATACLASSES = """import dataclasses, sys, time
made = [0, 0.0]
process = dataclasses._process_class
def timed(cls, *args, **kwargs):
    start = time.perf_counter()
    try:
        return process(cls, *args, **kwargs)
    finally:
        made[0] += 1
        made[1] += time.perf_counter() - start
dataclasses._process_class = timed
{code}
print('DATACLASSES', made[0], made[1] * 1000, file=sys.stderr)
"""
GOAL_MS = 60  # the CLI's help must start within this many ms of imports
HELP_CASES = ("`platform-run --help`", "`platform-run launch --help`")


def measure(code: str, env: dict) -> tuple[float, int, int]:
    """(ms of imports, platform_plugin modules, all modules) of one fresh interpreter."""
    code += ("\nimport sys; print('MODULES', sum(m.startswith('platform_plugin') "
             "for m in sys.modules), len(sys.modules), file=sys.stderr)")
    code = "import sys; sys.stderr.write('START\\n')\n" + code  # start-up imports come before
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env,
                          capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    total_us, ours, modules = 0, 0, 0
    lines = proc.stderr.splitlines()
    for line in lines[lines.index("START") + 1:]:
        if line.startswith("import time:") and "|" in line:
            _self, cumulative, name = line[len("import time:"):].split("|")
            if not name.startswith("  ") and cumulative.strip().isdigit():  # top level only
                total_us += int(cumulative)
        elif line.startswith("MODULES"):
            ours, modules = int(line.split()[1]), int(line.split()[2])
    return total_us / 1000, ours, modules


def dataclasses_of(code: str, env: dict) -> tuple[int, float]:
    """(dataclasses made, ms spent making them) by `code` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _DATACLASSES.format(code=code)], env=env,
                          capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    line = next(l for l in proc.stderr.splitlines() if l.startswith("DATACLASSES"))
    return int(line.split()[1]), float(line.split()[2])


def run_cases(rounds: int, log_dir: str) -> tuple[list[tuple], tuple[int, float, float]]:
    """Rows (case, median ms, min ms, our modules, all modules), and the launch's dataclasses
    (count, median ms, min ms)."""
    rows = []
    with compiled_package() as path:
        env = env_for(path)
        for label, code in CASES.items():
            code = code.replace("LOG_DIR", log_dir)
            runs = [measure(code, env) for _ in range(rounds)]
            ms = [r[0] for r in runs]
            rows.append((label, statistics.median(ms), min(ms), runs[0][1], runs[0][2]))
        launch = _MAIN.format(argv=_LAUNCH).replace("LOG_DIR", log_dir)
        made = [dataclasses_of(launch, env) for _ in range(rounds)]
    spent = [ms for _count, ms in made]
    return rows, (made[0][0], statistics.median(spent), min(spent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_before = load_text()
    with tempfile.TemporaryDirectory(prefix="bench_imports_") as log_dir:
        rows, (classes, classes_ms, classes_min) = run_cases(args.rounds, log_dir)
    help_rows = [r for r in rows if r[0] in HELP_CASES]
    worst = max(r[1] for r in help_rows)
    worst_min = max(r[2] for r in help_rows)
    verdict = "meets" if worst <= GOAL_MS else "MISSES"
    lines = [
        "## imports", "",
        f"`python bench/imports.py --rounds {args.rounds}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python "
        f"{sys.version.split()[0]}; {load_before} at the start, {load_text()} at the end "
        "(a shared machine: other work ran alongside). The sum of the top-level cumulative "
        "times of `python -X importtime` (the interpreter's own start-up is not in it), median "
        "and minimum of the rounds, from a compiled copy of the package (its .pyc, as a pip "
        "install or an image has them). Absolute times grow with the load; the module counts "
        "are exact (tests/test_layout.py holds a budget for them).", "",
        "| case | imports, median (ms) | min (ms) | platform_plugin modules | all modules |",
        "|---|---|---|---|---|"]
    lines += [f"| {label} | {ms:.1f} | {low:.1f} | {ours} | {mods} |"
              for label, ms, low, ours, mods in rows]
    lines += ["", f"Goal: `--help` and `launch --help` within {GOAL_MS} ms of imports: "
              f"{verdict} (worst median {worst:.1f} ms; worst minimum {worst_min:.1f} ms - on a "
              "loaded machine the median grows with the load, the minimum is the better "
              "estimate of a quiet start).", "",
              f"Of the launch's imports, its value classes: {classes} dataclasses are made while "
              f"the launch path is imported, {classes_ms:.1f} ms median ({classes_min:.1f} ms "
              "min) in dataclasses' class processing (each compiles its generated methods)."]
    text = "\n".join(lines)
    print(text)
    print(f"imports: --help and launch --help <= {GOAL_MS} ms: {verdict}")
    if not args.no_write:
        write_section("imports", text)


if __name__ == "__main__":
    main()
