""""Did you mean ...?" for argparse: unknown flags and sub-commands, in the CLI and `%dist_run`."""
from __future__ import annotations

import argparse
import difflib
import re

_UNKNOWN = "unrecognized arguments: "
_CHOICE = re.compile(r"invalid choice: '([^']*)'")


def closest(word: str, candidates) -> str | None:
    found = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def with_suggestions(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's error message, plus the closest flag for each unknown one and the closest
    choice for an invalid one."""
    hints = []
    if message.startswith(_UNKNOWN):
        flags = [a for a in parser._option_string_actions if a.startswith("--")]
        for word in message[len(_UNKNOWN):].split():
            match = closest(word.split("=", 1)[0], flags) if word.startswith("-") else None
            if match:
                hints.append(f"{word}: did you mean {match}?")
    choice = _CHOICE.search(message)
    if choice:
        choices = [c for a in parser._actions if a.choices for c in a.choices]
        match = closest(choice.group(1), choices)
        if match:
            hints.append(f"did you mean {match!r}?")
    return message + "".join(f"\n  {hint}" for hint in hints)
