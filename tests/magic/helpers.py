"""A real IPython kernel for the magic tests, and the messages one cell produced."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from platform_plugin.launcher.processes.result import JOB_RESULT_MIME

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Cell:
    reply: dict
    stream: str = ""
    displays: list = field(default_factory=list)  # (msg_type, data) of display/update messages
    results: list = field(default_factory=list)  # JobResult dicts %dist_run published as data
    error: list = field(default_factory=list)  # the traceback lines, ANSI removed

    @property
    def ok(self) -> bool:
        return self.reply["status"] == "ok"

    @property
    def board(self) -> str:
        """The last state of the board (text/plain)."""
        return self.displays[-1][1]["text/plain"] if self.displays else ""


def run_cell(kc, code: str, timeout: float = 180) -> Cell:
    cell = Cell(reply={})

    def hook(msg):
        content = msg["content"]
        kind = msg["msg_type"]
        if kind == "stream":
            cell.stream += content["text"]
        elif kind == "display_data" and JOB_RESULT_MIME in content["data"]:
            cell.results.append(content["data"][JOB_RESULT_MIME])
        elif kind in ("display_data", "update_display_data"):
            cell.displays.append((kind, content["data"]))
        elif kind == "error":
            cell.error = [ANSI.sub("", line) for line in content["traceback"]]
    cell.reply = kc.execute_interactive(code, output_hook=hook, timeout=timeout)["content"]
    return cell
