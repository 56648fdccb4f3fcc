"""The ranks of the output benchmark (bench/launch_output.py): Python programs for `-c`.

`plain(lines)`: ~58-byte lines without a `[` (the goal's row, kept for comparability with the
earlier runs: its text never reaches the chatter test's substring searches).

`realistic(lines)`: what a training rank prints, the same number of lines:
- MindSpore's networking chatter at the start (40 glog lines the display hides);
- Python logging lines with a timestamp and `[INFO]`, every 25th a `[WARNING]` with a `(`
  (a `[` and a `(` in every chunk: the chatter test runs its substring searches over every
  byte, as it does for MindSpore's own `[WARNING] ME(...)` lines);
- every 50th line a tqdm-like progress bar: three `\\r` redraws (UTF-8 block characters),
  each its own write as tqdm does, then the newline.
"""
from __future__ import annotations

_HEAD = "import os,sys\nr=int(os.environ.get('RANK_ID') or sys.argv[1])\nw=sys.stdout.write\n"


def plain(lines: int) -> str:
    return _HEAD + f"for i in range({lines}): w(f'rank {{r}} line {{i}} ' + 'x'*40 + '\\n')\n"


_CHATTER = ("for i in range(40): w(f'[WARNING] DISTRIBUTED({{os.getpid()}},7f3a2b1c0700,python):"
            "2026-12-01-02:55:41.{{i:03d}}.512 [mindspore/ccsrc/distributed/cluster/topology/"
            "compute_graph_node.cc:{{200+i}}] Register] Failed to connect to the meta server "
            "node, retry after 3 seconds\\n')\n")


def realistic(lines: int) -> str:
    bars = ("def bar(i):\n"
            "    for p in (i % 97, i % 97 + 1, i % 97 + 2):\n"
            f"        w(f'\\rEpoch 1: {{p:3d}}%|' + '\u2588'*(p//10) + ' '*(10-p//10) + "
            f"f'| {{i}}/{lines} [00:01<00:02, 812.34it/s]')\n"
            "    w('\\n')\n")
    loop = (f"for i in range({lines - 40}):\n"
            "    if i % 50 == 49: bar(i)\n"
            "    elif i % 25 == 12: w(f'2026-12-01 02:55:41,{i%1000:03d} [WARNING] train.py:88 - "
            "rank {r}: gradient overflow (loss scale 65536 -> 32768)\\n')\n"
            "    else: w(f'2026-12-01 02:55:41,{i%1000:03d} [INFO] train.py:120 - rank {r} "
            "step {i} loss {1/(i+1):.4f} lr 1.0e-04\\n')\n")
    return _HEAD + _CHATTER.format() + bars + loop


def with_loss_monitor(lines: int, every: int = 100) -> str:
    """`realistic(lines)` with every `every`-th line MindSpore's LossMonitor line instead
    (`epoch: 1 step: N, loss is X`): what the launcher reads into the rank's spool as `loss`
    (bench/output_metrics.py)."""
    return realistic(lines).replace(
        "    if i % 50 == 49: bar(i)\n",
        f"    if i % {every} == {every - 1}: w(f'epoch: 1 step: {{i // {every} + 1}}, loss is "
        "{1/(i+1):.6f}\\n')\n"
        "    elif i % 50 == 49: bar(i)\n")
