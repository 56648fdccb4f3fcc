"""The table a failed job prints (`render_result`): the headline, the root cause with its last
lines, one row per process; and how wide the terminal it goes to is."""
from __future__ import annotations

import os
import sys
import textwrap
from typing import TextIO
from unicodedata import combining, east_asian_width

from platform_plugin.launcher.processes.result import JobResult, JobStatus, describe_exit, name_label
from platform_plugin.util.jobdirs import log_name
from platform_plugin.util.texttable import render_rows


def render_result(result: JobResult, width: int | None = None,
                  attempt: tuple[int, int] | None = None, rows: bool = True) -> str:
    """A compact table: one headline, the root cause with its last lines, one row per rank,
    then where the ranks were (a stopped job; "stuck in" for a hang). `width`: the terminal's columns (the CLI);
    the table fits them, a stack line is clipped (every frame is in the job's stacks/).
    `attempt`: (number, of how many) for an attempt that is restarted (--max-restarts): the
    headline names the attempt, not the job, which goes on. `rows` False: no process table (the
    notebook's board above it turned into the result: each process's end is in its row)."""
    ranks = len(result.exitcodes)
    what = f"(backend {result.backend}, {ranks} process{'es' if ranks != 1 else ''})"
    if attempt is not None:
        head = (f"attempt {attempt[0]} of {attempt[1]} {result.status.upper()} after "
                f"{result.duration_s:.1f}s {what}")
    elif result.attempts:
        head = (f"job {result.job_id} {result.status.upper()} after "
                f"{result.whole_duration_s:.1f}s, {attempt_times(result)} {what}")
    else:
        head = f"job {result.job_id} {result.status.upper()} after {result.duration_s:.1f}s {what}"
    lines = textwrap.wrap(head, width, subsequent_indent="  ") if width else [head]  # never past it
    cause = result.root_cause
    if result.reason and cause is None:
        lines.append(f"  why: {result.reason}")
    if cause is not None:
        device = "" if cause.device_id is None else f"device {cause.device_id}, "  # (a CPU box: none)
        lines.append(f"  root cause: {cause.label} ({device}host "
                     f"{cause.host}, pid {_dash(cause.pid)}) {cause.how} after "
                     f"{cause.runtime_s:.1f}s")
        if cause.recorded:  # torch's @record: the exception, whatever the log's last lines hold
            lines.append(f"  recorded by the rank (TORCHELASTIC_ERROR_FILE): {cause.recorded[0]}")
            lines.extend(f"    at {frame}" for frame in cause.recorded[1:])
        if cause.last_lines:
            count = len(cause.last_lines)
            lines.append(f"  last {'line' if count == 1 else f'{count} lines'} of "
                         f"{log_name(cause.name)}:")
            lines.extend(f"    | {line}" for line in cause.last_lines)
            if any(STDIN_EOF in line for line in cause.last_lines[-3:]):
                lines.append("  hint: ranks read no keyboard (stdin is empty: input() ends at "
                             "once); pass the value as an argument, a variable or a file")
        if cause.signal_name == "SIGKILL":  # the launcher sends none before a root cause
            lines += ["  hint: SIGKILL from outside the launcher: most often the out-of-memory "
                      "killer", f"        (`dmesg` shows \"Killed process {_dash(cause.pid)}\"); "
                      "check the server's memory"]
    if (result.failures or not result.ok) and rows:
        lines.append(_table(result))
        lines.extend(_stacks(result, width))
    held = {k: v for k, v in result.held_back.items() if v}
    if held:
        parts = ", ".join(f"{name_label(k)}: {v}" for k, v in held.items())
        lines.append(f"  lines held back from the display (complete in the logs): {parts}")
    lines.append(f"  logs: {result.job_dir}")
    if result.attempts and not result.ok:
        lines.append(f"  all {len(result.attempts) + 1} attempts failed; the earlier ones:")
        for earlier in result.attempts:  # rendered whole when it failed: clipped here as
            table = earlier["table"].splitlines()  # headed "attempt K of N ..." (older: "job ...")
            label = [] if table and table[0].startswith("attempt ") else [f"attempt {earlier['attempt']}:"]
            lines.extend(f"  | {line}" if line.startswith(WHOLE) else clip(f"  | {line}", width)
                         for line in label + table)  # the table above is
            if earlier.get("resumed"):  # what the next attempt resumed from (launcher/resume.py)
                lines.extend(wrapped(earlier["resumed"]["text"], width, "  "))
    return "\n".join(lines)


def attempt_times(result: JobResult) -> str:
    """Each attempt's time, in order: "attempt 1 failed after 12.0s, attempt 2 ran 30.5s"."""
    earlier = [f"attempt {a['attempt']} {a['status']} after {a['duration_s']:.1f}s"
               for a in result.attempts]
    last = len(result.attempts) + 1
    verb = "ran" if result.ok else f"{result.status} after"
    return ", ".join(earlier + [f"attempt {last} {verb} {result.duration_s:.1f}s"])


WHOLE = ("    | ", "  logs: ")  # a root cause's quoted lines (clipped on their own), a folder
STDIN_EOF = "EOFError: EOF when reading a line"  # input() in a rank
STACK_FRAMES = 2  # innermost frames per rank in the table; the full stack is in the log


def _table(result: JobResult) -> str:
    by_name = {f.name: f for f in result.failures}
    rows: list[tuple[str, ...]] = []
    for name, code in result.exitcodes.items():
        failure = by_name.get(name)
        if failure is None:
            _, sig = describe_exit(code)
            rank, device, pid, runtime = result.ended_well.get(name) or (None, None, None, None)
            rows.append((name_label(name), _dash(rank), _dash(device), _dash(pid),
                         sig or f"exit {code}", "-" if runtime is None else f"{runtime:.1f}s",
                         "ok"))
            continue
        rows.append((failure.label, _dash(failure.rank_id), _dash(failure.device_id),
                     _dash(failure.pid), failure.how, f"{failure.runtime_s:.1f}s", failure.note))
    header = ["process", "rank", "device", "pid", "ended", "runtime", "note"]
    if all(row[2] == "-" for row in rows):  # no device at all (a CPU box): no column of dashes
        header = header[:2] + header[3:]
        rows = [row[:2] + row[3:] for row in rows]
    return render_rows(header, rows, indent="  ")


def _stacks(result: JobResult, width: int | None) -> list[str]:
    """Where a stopped job's ranks were (hang, timeout, interrupt): one line per distinct pair
    of innermost frames with the ranks that share it, the most shared first. 8 ranks in the same
    collective are one line (not 8 rows 150 columns wide), the rank stuck elsewhere stands out."""
    groups: dict[str, list[str]] = {}
    for failure in result.failures:
        if failure.stack:
            frames = " < ".join(_own_frames(failure.stack)[:STACK_FRAMES])
            groups.setdefault(frames, []).append(failure.name)
    if not groups:
        return []
    labels = {frames: _names(names, LABEL_MAX) for frames, names in groups.items()}
    pad = max(len(label) for label in labels.values()) + 1
    # "stuck" only where the job was found hung: a timeout may be slow work, an interrupt the user's
    where = "stuck in" if result.status == JobStatus.HUNG else "where the ranks were"
    lines = [f"  {where} (innermost frames; every frame in the job's stacks/):"]
    for frames, names in sorted(groups.items(), key=lambda item: -len(item[1])):
        line = f"    {(labels[frames] + ':').ljust(pad)} {frames}"
        lines.append(clip(line, width, keep=4 + pad + 20))
    return lines


LABEL_MAX = 32  # a place's ranks: every other one of 128 ranks would be ~250 columns


def _names(names: list[str], limit: int) -> str:
    """["0", "1", "3", "sched"] -> "ranks 0-1, 3, sched"; ["2"] -> "rank 2"; longer than
    `limit` (ranks scattered over servers): their count and the first ones, "64 ranks 0, 2, …"
    (the frames must stay on the line; each rank's stack is in the job's stacks/)."""
    numbers = sorted(int(n) for n in names if n.isdigit())
    spans: list[str] = []
    for i, number in enumerate(numbers):
        if i and number == numbers[i - 1] + 1:
            spans[-1] = f"{spans[-1].split('-')[0]}-{number}"
        else:
            spans.append(str(number))
    spans += [n for n in names if not n.isdigit()]
    word = "ranks" if len(numbers) > 1 else ("rank" if numbers else "")
    label = f"{word} {', '.join(spans)}".strip()
    if len(label) <= limit:
        return label
    head = f"{len(names)} {word or 'processes'} "
    shown: list[str] = []
    for span in spans:
        if len(head) + len(", ".join(shown + [span])) + len(", …") > limit:
            break
        shown.append(span)
    return head + ", ".join(shown + ["…"])


def wrapped(text: str, width: int | None, indent: str) -> list[str]:
    """`text` after `indent` in lines of `width` (the next ones indented 2 more); a path is
    never cut (one longer than a line stands alone on its line)."""
    if width is None:
        return [indent + text]
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)


def clip(line: str, width: int | None, keep: int = 0) -> str:
    """`line` cut to `width` columns with "…" (at least `keep` characters stay: what names
    the line); whole when `width` is None (a pipe, a file, a notebook). Columns, not
    characters: a Chinese character (a comment in a cell, a message) takes two."""
    if not width or len(line) <= width and line.isascii():
        return line
    if line.isascii():
        return line[:max(width - 1, keep)] + "…"
    columns = [0 if combining(c) else 2 if east_asian_width(c) in ("W", "F") else 1
               for c in line]
    if sum(columns) <= width:
        return line
    used = cut = 0
    while used + columns[cut] <= width - 1:  # (the line is wider: `cut` stays inside it)
        used += columns[cut]
        cut += 1
    return line[:max(cut, keep)] + "…"


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The columns of the terminal the table goes to (`stream`, default stdout): COLUMNS if
    set, else the stream's terminal; None for a pipe, a file or a notebook (nothing is
    clipped there)."""
    stream = sys.stdout if stream is None else stream
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
        if columns <= 0 and stream.isatty():
            columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns if columns > 0 else None


def _own_frames(stack: list[str]) -> list[str]:
    """A rank stopped during an import (MindSpore's take seconds) is "stuck in" importlib's
    frozen frames, 130 characters of `_call_with_frames_removed (<frozen importlib...>)`: the
    table shows the frames of real files (all frames stay in stacks/ and the log)."""
    own = [frame for frame in stack if "(<frozen " not in frame]
    return own or stack


def _dash(value: object) -> str:
    return "-" if value is None else str(value)
