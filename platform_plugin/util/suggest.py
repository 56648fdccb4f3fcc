""""Did you mean ...?" for argparse: unknown flags and sub-commands, in the CLI and `%dist_run`.

Every bad flag of a line is named in one go: argparse alone stops at the first unknown flag of
a parser whose command comes last (`--nprocs 2 --show-all -- python t.py`: "2" would start the
command), so the words the parser was given are scanned too (`remember_words`). A flag with its
value glued on (`--show-all`) is pointed to the flag and its value (`--show all`)."""
from __future__ import annotations

import argparse
import difflib
import re

_UNKNOWN = "unrecognized arguments: "
_CHOICE = re.compile(r"invalid choice: '([^']*)'")


def closest(word: str, candidates) -> str | None:
    found = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def remember_words(parser: argparse.ArgumentParser, args) -> None:
    """Keep the words a parser is about to parse (for `with_suggestions`)."""
    parser.words = list(args) if args is not None else None  # type: ignore[attr-defined]


def with_suggestions(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's error message, naming every unknown flag, plus the closest flag for each
    unknown one and the closest choice for an invalid one."""
    hints = []
    if message.startswith(_UNKNOWN):
        unknown = message[len(_UNKNOWN):].split()
        unknown += [w for w in unknown_flags(parser, getattr(parser, "words", None) or [])
                    if w not in unknown]
        message = _UNKNOWN + " ".join(unknown)
        for word in unknown:
            hint = flag_hint(parser, word) if word.startswith("-") else None
            if hint:
                hints.append(f"{word}: did you mean {hint}?")
    choice = _CHOICE.search(message)
    if choice:
        choices = [c for a in parser._actions if a.choices for c in a.choices]
        match = closest(choice.group(1), choices)
        if match:
            hints.append(f"did you mean {match!r}?")
    return message + "".join(f"\n  {hint}" for hint in hints)


def flag_hint(parser: argparse.ArgumentParser, word: str) -> str | None:
    """`--show-all` -> "--show all" (a flag that takes a value, the value glued on with - or _);
    else the closest flag (`--nprocs` -> "--nproc")."""
    name = word.split("=", 1)[0]
    flags = _long_flags(parser)
    for flag in sorted(flags, key=len, reverse=True):
        rest = name[len(flag) + 1:]
        if name.startswith(flag) and name[len(flag):len(flag) + 1] in "-_" and rest \
                and _takes_value(flags[flag]):
            return f"{flag} {rest}"
    return closest(name, flags)


def unknown_flags(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The unknown flags among the option words of a parser whose last argument takes the rest
    of the line (a command): every word up to the command (or `--`), a value after its flag."""
    if not any(a.nargs == argparse.REMAINDER for a in parser._actions):
        return []  # argparse itself names every unknown flag of the others
    flags, found, skip = _long_flags(parser), [], False
    known = parser._option_string_actions
    for word in words:
        if skip:
            skip = False
            continue
        if word == "--" or not word.startswith("-") or _number(word):
            break
        name = word.split("=", 1)[0]
        action = known.get(name)
        if action is None:
            found.append(word)
            guess = closest(name, flags)  # `--nprocs 2`: its 2 is a value, not the command
            action = flags.get(guess) if guess and flag_hint(parser, word) == guess else None
        skip = action is not None and "=" not in word and _takes_value(action)
    return found


def _long_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a: action for a, action in parser._option_string_actions.items() if a.startswith("--")}


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
