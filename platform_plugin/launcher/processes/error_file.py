"""What a failed torch rank recorded in TORCHELASTIC_ERROR_FILE: its exception, as JSON.

torch's `@record` (torch/distributed/elastic/multiprocessing/errors) wraps a script's `main`; on
an exception it writes `{"message": {"message": "RuntimeError: ...", "extraInfo":
{"py_callstack": <traceback>, "timestamp": "<s>"}}}` to the file the variable names, then
re-raises. torchrun reads it for its failure summary; the launcher reads it for the root cause.
"""
from __future__ import annotations

import json
import re

ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"
MAX_BYTES = 1 << 20  # a recorded traceback is kilobytes; never read a runaway file whole
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+, in .+$')


def recorded_error(path: str | None) -> list[str]:
    """[the exception's message, its innermost frame] from the rank's error file; [] when the
    rank wrote none (it did not use @record, or it died of a signal) or it is unreadable."""
    if not path:
        return []
    try:
        with open(path, "rb") as file:
            data = json.loads(file.read(MAX_BYTES).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return []
    message = data.get("message") if isinstance(data, dict) else None
    extra: dict = {}
    if isinstance(message, dict):  # @record's form; a plain string is torchrun's own
        info = message.get("extraInfo")
        extra = info if isinstance(info, dict) else {}
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return []
    lines = [message.strip().splitlines()[0]]
    stack = extra.get("py_callstack")
    frames = [line.strip() for line in stack.splitlines() if _FRAME.match(line)] \
        if isinstance(stack, str) else []
    return lines + frames[-1:]
