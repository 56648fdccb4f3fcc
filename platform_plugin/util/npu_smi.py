"""`npu-smi info`: per-NPU AI Core utilisation and HBM use, parsed from its table.

The table has two lines per NPU (Ascend 910/910B, npu-smi 2x.x):

    | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
    | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
    +===========================+===============+====================================================+
    | 0     910B3               | OK            | 101.8       43                0    / 0             |
    | 0                         | 0000:C1:00.0  | 37          0    / 0          3318 / 65536         |

followed by a process table, which is ignored. Values that npu-smi prints as NA are skipped.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

_NPU_ROW = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*([^|]*?)\s*\|")
_CHIP_ROW = re.compile(r"^\|\s*\d+\s*\|\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f:.]+\s*\|\s*(\d+|NA)\s+"
                       r"(\d+|NA)\s*/\s*(\d+|NA)\s+(\d+|NA)\s*/\s*(\d+|NA)")


@dataclass(frozen=True)
class NpuSample:
    npu_id: int
    name: str
    health: str
    aicore_percent: float | None
    hbm_used_mb: float | None
    hbm_total_mb: float | None


def _number(text: str) -> float | None:
    return None if text == "NA" else float(text)


def parse(text: str) -> dict[int, NpuSample]:
    """npu id -> sample; the rows before the process table only."""
    found: dict[int, NpuSample] = {}
    current: tuple[int, str, str] | None = None
    for line in text.splitlines():
        if "Process id" in line or "Process name" in line:
            break
        chip = _CHIP_ROW.match(line)
        if chip and current is not None:
            npu_id, name, health = current
            aicore, _, _, hbm_used, hbm_total = chip.groups()
            found[npu_id] = NpuSample(npu_id, name, health, _number(aicore), _number(hbm_used),
                                      _number(hbm_total))
            current = None
            continue
        row = _NPU_ROW.match(line)
        if row and not line.lstrip("| ").startswith("NPU"):
            current = (int(row.group(1)), row.group(2), row.group(3))
    return found


def sample(executable: str | None = None, timeout: float = 5.0) -> dict[int, NpuSample]:
    """Run `npu-smi info` (PATH unless given); {} when it is missing or fails."""
    exe = executable or shutil.which("npu-smi")
    if not exe:
        return {}
    try:
        done = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse(done.stdout) if done.returncode == 0 else {}
