"""Mount points below ROOT, from /proc/self/mountinfo.

The walk never leaves ROOT's filesystem: it compares each folder's `st_dev` with ROOT's. A bind
mount of a folder from the SAME filesystem keeps the same `st_dev`, so the walk also skips
every path this table lists (folders and bind-mounted files). A mount made while the walk
runs is caught by `st_dev` only when it is another filesystem (a documented limit).
"""
from __future__ import annotations

MOUNTINFO = "/proc/self/mountinfo"


def mount_points_below(root: str) -> frozenset[tuple[str, ...]]:
    """ROOT-relative paths (as parts) of every mount point strictly below `root`."""
    prefix = root.rstrip("/") + "/"
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return frozenset()  # no procfs: st_dev alone still catches other filesystems
    found = set()
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        point = _unescape(fields[4])
        if point.startswith(prefix):
            found.add(tuple(point[len(prefix):].split("/")))
    return frozenset(found)


def _unescape(field: str) -> str:
    r"""mountinfo writes space, tab, newline and backslash as octal escapes (\040 ...)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)
