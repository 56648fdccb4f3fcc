"""Import cost of what runs often: `import platform_plugin.tracking` inside every rank, and
`platform-run --help` / `platform-run launch --help` at the terminal.

    python bench/imports.py [--rounds 7]

Each case runs in a fresh interpreter with `python -X importtime` (PYTHONDONTWRITEBYTECODE=1
too: the first run after an install, when no .pyc exists yet, is also shown). The number is
the sum of the top-level cumulative import times (microseconds -> ms), the median of the rounds,
and the count of platform_plugin modules loaded. The results go to docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdoc import write_section  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "import platform_plugin.tracking (a rank)": "import platform_plugin.tracking",
    "platform-run --help": "from platform_plugin.cli import main\ntry: main(['--help'])\n"
                           "except SystemExit: pass",
    "platform-run launch --help": "from platform_plugin.cli import main\n"
                                  "try: main(['launch', '--help'])\nexcept SystemExit: pass",
}
GOAL_MS = 60  # the CLI's help must start within this many ms of imports


def measure(code: str, *, no_bytecode: bool) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if no_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    code += ("\nimport sys; print('MODULES', sum(m.startswith('platform_plugin') "
             "for m in sys.modules), file=sys.stderr)")
    code = "import sys; sys.stderr.write('START\\n')\n" + code  # start-up imports come before
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env,
                          capture_output=True, text=True, check=True)
    total_us, modules = 0, 0
    lines = proc.stderr.splitlines()
    for line in lines[lines.index("START") + 1:]:
        if line.startswith("import time:") and "|" in line:
            _self, cumulative, name = line[len("import time:"):].split("|")
            if not name.startswith("  ") and cumulative.strip().isdigit():  # top level only
                total_us += int(cumulative)
        elif line.startswith("MODULES"):
            modules = int(line.split()[1])
    return total_us / 1000, modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    rows = []
    for label, code in CASES.items():
        for no_bytecode in (False, True):
            runs = [measure(code, no_bytecode=no_bytecode) for _ in range(rounds)]
            ms = statistics.median(r[0] for r in runs)
            rows.append((label, "no .pyc" if no_bytecode else ".pyc", ms, runs[0][1]))
    load = os.getloadavg()
    lines = ["## imports", "",
             f"`python bench/imports.py --rounds {rounds}` on {time.strftime('%Y-%m-%d')}, "
             f"Python {sys.version.split()[0]}, {os.cpu_count()} cores "
             f"(load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}): the sum of the "
             "top-level cumulative times of `python -X importtime` (the interpreter's own "
             "start-up is not in it), median of the rounds. Absolute times grow with the "
             "machine's load (under a load of 15 on 2 cores one case spread 100-420 ms); the "
             "module counts are exact and are what the layout test (tests/test_layout.py) "
             "holds.", "",
             "| case | bytecode | imports (ms) | platform_plugin modules |", "|---|---|---|---|"]
    lines += [f"| {label} | {kind} | {ms:.1f} | {mods} |" for label, kind, ms, mods in rows]
    cli = [ms for label, kind, ms, _ in rows if label.startswith("platform-run") and kind == ".pyc"]
    lines += ["", f"Goal: `--help` and `launch --help` within {GOAL_MS} ms of imports: "
              f"{'meets' if max(cli) <= GOAL_MS else 'MISSES'} (worst {max(cli):.1f} ms, with .pyc). "
              "Without .pyc (the first run after an install) the numbers include compiling."]
    write_section("imports", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
