"""What `platform-run launch --tracking none` loads, counted from a real run (bench/launch.py's
"where the CLI's time goes" paragraph): the package modules and their lines before the first
process of the job is spawned (they delay the first rank) and after it (they share the cores
with the ranks' start)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_CODE = """import json, os, sys
before = []
def hook(event, args):
    if event == 'subprocess.Popen' and not before:
        before.extend(m for m in sys.modules if m.startswith('platform_plugin'))
sys.addaudithook(hook)
sys.stdout = open(os.devnull, 'w')
from platform_plugin.cli import main
main({argv!r})
sys.stdout = sys.__stdout__
print(json.dumps([before, {{m: getattr(sys.modules[m], '__file__', None) for m in sys.modules
                           if m.startswith('platform_plugin')}}]))
"""


def split_by_spawn(nproc: int = 8) -> dict[str, tuple[int, int]]:
    """{"before": (modules, lines), "after": (modules, lines)} of one untracked plain launch."""
    with tempfile.TemporaryDirectory(prefix="bench_path_") as tmp:
        argv = ["launch", "--nproc", str(nproc), "--tracking", "none", "--show", "none",
                "--backend", "plain", "--log-dir", tmp, "--", sys.executable, "-c", "pass"]
        out = subprocess.run([sys.executable, "-c", _CODE.format(argv=argv)], check=True,
                             capture_output=True, text=True, cwd=tmp,
                             env=dict(os.environ, PYTHONPATH=str(REPO))).stdout
    before, files = json.loads(out.splitlines()[-1])
    counts = {"before": [0, 0], "after": [0, 0]}
    for name, path in files.items():
        side = counts["before" if name in before else "after"]
        side[0] += 1
        side[1] += Path(path).read_text(encoding="utf-8").count("\n") if path else 0
    return {side: (modules, lines) for side, (modules, lines) in counts.items()}


if __name__ == "__main__":
    print(split_by_spawn())
