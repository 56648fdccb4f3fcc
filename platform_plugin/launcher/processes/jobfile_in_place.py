"""job.json on a full disk: the atomic rewrite found no space, so the document is written over
the file's own blocks (the first write reserved room for it: jobfile.RESERVE), compacted if it
must. Imported only then (jobfile.py).
"""
from __future__ import annotations

import os

from platform_plugin.launcher.processes.jobfile import _dumps


def overwrite_in_place(path: str, data: dict) -> tuple[bool, str]:
    """Write over the existing file's blocks (no new space needed while it fits): (written,
    what to add to the error)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return False, ""
    for text in _smaller_forms(data):
        if len(text.encode()) > size:
            continue
        try:
            with open(path, "r+b") as fh:
                raw = text.encode()
                fh.write(raw + b" " * (size - len(raw)))  # same length: no new blocks
            return True, " (written in place, over the space reserved at the start)"
        except OSError:
            return False, ""
    return False, ""


def _smaller_forms(data: dict):
    """The document, then more compact versions of it (the last lines of each failed rank go
    last: they are also in the rank logs)."""
    import json
    yield _dumps(data)
    yield json.dumps(data, separators=(",", ":"), default=str) + "\n"
    result = data.get("result")
    if isinstance(result, dict):
        trimmed = dict(result, failures=[dict(f, last_lines=[]) for f in result.get("failures", [])],
                       root_cause=(dict(result["root_cause"], last_lines=[])
                                   if result.get("root_cause") else None))
        yield json.dumps(dict(data, result=trimmed), separators=(",", ":"), default=str) + "\n"
