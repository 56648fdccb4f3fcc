"""The devices this machine shows a process: NPUs (/dev/davinciN within
ASCEND_RT_VISIBLE_DEVICES), GPUs (/dev/nvidiaN within CUDA_VISIBLE_DEVICES), usable cores.
String tests on /dev's names, no driver call: every launch may ask."""
from __future__ import annotations

import os
from typing import Mapping


def dev_names() -> list[str]:
    """The names in /dev (a test gives its own: no NPU exists here)."""
    try:
        return os.listdir("/dev")
    except OSError:
        return []


def _numbered(prefix: str) -> list[int]:
    return sorted(int(n[len(prefix):]) for n in dev_names()
                  if n.startswith(prefix) and n[len(prefix):].isdigit())


def _within(devices: list[int], visible: str | None) -> list[int]:
    if visible is None or not visible.strip():
        return devices
    allowed = {v.strip() for v in visible.split(",")}
    return [d for d in devices if str(d) in allowed]


def visible_npus(environ: Mapping[str, str]) -> list[int]:
    """The NPUs a process started with `environ` may use (physical ids)."""
    return _within(_numbered("davinci"), environ.get("ASCEND_RT_VISIBLE_DEVICES"))


def visible_gpus(environ: Mapping[str, str]) -> list[int]:
    """The NVIDIA GPUs a process started with `environ` may use (an empty
    CUDA_VISIBLE_DEVICES hides them all, as CUDA does)."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return []
    return _within(_numbered("nvidia"), visible)


def usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit), else the count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1
