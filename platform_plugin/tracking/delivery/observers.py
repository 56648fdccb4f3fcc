"""Extension point of the forwarder: observers that see every batch the sink accepted.

An observer is any object with `delivered(label, records)` (records as in the spool, see
spool.py) and optionally `job_ending(status)` (called once by the forwarding helper before it
ends the runs). Factories are listed in OBSERVERS as "module:function"; each is called with
(config, sink, spool_dir) in the process that forwards (the launcher's helper process, `sync`,
or a script forwarding on its own) and returns an observer or None. An observer's error is
reported, never raised into delivery.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

OBSERVERS: list[str] = []


def make_observers(config: Any, sink: Any, spool_dir: Path) -> list:
    made = []
    for path in OBSERVERS:
        module, _, name = path.partition(":")
        observer = getattr(importlib.import_module(module), name)(config, sink, spool_dir)
        if observer is not None:
            made.append(observer)
    return made
