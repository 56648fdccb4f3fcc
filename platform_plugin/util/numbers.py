"""Numbers read from text a user controls (flags, variables, rank tables, .env, /proc).

ONE reading for every number a user types, as the docs write them: ASCII digits, an optional
leading `-` (so a negative one is refused by its range, which says what is allowed), for a
decimal number an optional fraction and exponent (`2.5`, `1e3`). Python's int() and float()
accept much more: `1_000`, full-width or Arabic-Indic digits, `+1`, ` 2`, `nan`, `inf`, a
5,000-digit string (a ValueError over 4,300 digits), `1e999` (infinity) - so `--nproc 1_000`
started 1,000 ranks. Everything else is refused with the reason, and the caller's code:
- `whole(text)` / `decimal(text)`: the value, or ValueError(the reason);
- `Bounds`: a range, as a check (value -> what is wrong with it, or None);
- `NumberArgument(code, flag, kind, ...)`: an argparse `type=` that raises ConfigError with the
  flag's code (argparse lets it through: it only catches ValueError/TypeError).
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Optional, Union

from platform_plugin.errors import ConfigError, Problem

MAX_DIGITS = 18  # fits a signed 64-bit integer; far beyond any rank, device or port
MAX_DECIMAL_CHARS = 40  # `123456.789e-3` and its like; a longer one is no number anyone typed
_WHOLE = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?")
INFINITY = "inf"  # the one word a flag may accept (`sync --wait inf`), when it says so


def shown(text: str, limit: int = 40) -> str:
    """`text` as a message quotes it: repr'd, at most `limit` characters of it."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def whole(text: str) -> int:
    """A whole number written with ASCII digits (`-` allowed in front), at most MAX_DIGITS
    of them; else ValueError with the reason."""
    if not isinstance(text, str) or not _WHOLE.fullmatch(text):
        raise ValueError("use the digits 0-9 only (no spaces, _, + or decimal point)")
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"more than {MAX_DIGITS} digits")
    return int(text)


def decimal(text: str, *, infinite: bool = False) -> float:
    """A finite decimal number such as `3`, `2.5`, `.5`, `1e3` or `-1` (ASCII, no spaces, no
    `_`, no `+` in front); `infinite`: the word `inf` too. Else ValueError with the reason."""
    if infinite and text == INFINITY:
        return math.inf
    if not isinstance(text, str) or len(text) > MAX_DECIMAL_CHARS or not _DECIMAL.fullmatch(text):
        raise ValueError("use a number such as 3, 2.5 or 1e3 (digits 0-9; no spaces, _ or +; "
                         + ("or inf)" if infinite else "no nan or inf)"))
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("too large to be a number of seconds or a count")
    return value


def whole_number(text: object) -> int | None:
    """`text` as a non-negative int when it is 1..MAX_DIGITS ASCII digits (surrounding blanks
    allowed: the lenient reading of files such as rank tables and .env), else None: the caller
    reports it with its own code and path."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not text or len(text) > MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def too_long(text: object) -> bool:
    """A digit string refused only for its length (the message can say so)."""
    return isinstance(text, str) and len(text.strip()) > MAX_DIGITS and text.strip().isdigit()


def _written(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


@dataclasses.dataclass(frozen=True)
class Bounds:
    """A number's range: at least `low` (more than it when `above`), at most `high`. Called
    with a value it is a check: what is wrong with the value, or None."""

    low: Optional[float] = None
    high: Optional[float] = None
    above: bool = False

    def __call__(self, value: float) -> Optional[str]:
        low_ok = self.low is None or (value > self.low if self.above else value >= self.low)
        if low_ok and (self.high is None or value <= self.high):
            return None
        if self.low is not None and self.high is not None:
            if self.above:
                return f"must be > {_written(self.low)} and <= {_written(self.high)}"
            return f"must be between {_written(self.low)} and {_written(self.high)}"
        if self.low is not None:
            return f"must be {'>' if self.above else '>='} {_written(self.low)}"
        return f"must be <= {_written(self.high)}"  # type: ignore[arg-type]


POSITIVE = Bounds(0, above=True)  # a timeout, an interval: a number of seconds > 0
NOT_NEGATIVE = Bounds(0)
PORT = Bounds(1, 65535)
ANY_PORT = Bounds(0, 65535)  # 0: a free one, chosen when the server starts


def read(text: str, kind: type, *, bounds: Bounds | None = None, infinite: bool = False
         ) -> Union[int, float]:
    """`text` read as `kind` (int or float) within `bounds`; ValueError with the reason."""
    value: Union[int, float] = whole(text) if kind is int else decimal(text, infinite=infinite)
    complaint = bounds(value) if bounds is not None else None
    if complaint:
        raise ValueError(complaint)
    return value


class NumberArgument:
    """An argparse `type=` for a number flag: its text read by `read`, else a ConfigError with
    the flag's `code` (argparse lets it through: it only catches ValueError/TypeError). The
    attributes say what it reads, for the tests that try every number flag of every command."""

    def __init__(self, code: str, flag: str, kind: type = float, *,
                 bounds: Bounds | None = None, infinite: bool = False) -> None:
        self.code, self.flag, self.kind, self.bounds, self.infinite = code, flag, kind, bounds, infinite
        self.__name__ = "whole number" if kind is int else "number"

    def __call__(self, text: str) -> Union[int, float]:
        try:
            value = whole(text) if self.kind is int else decimal(text, infinite=self.infinite)
        except ValueError as exc:
            example = "2" if self.kind is int else "2.5"
            raise ConfigError([Problem(self.code, f"{self.flag} {shown(text)} is not a "
                                       f"{self.__name__}: give one, e.g. {self.flag} {example} "
                                       f"({exc})", self.flag)]) from None
        complaint = self.bounds(value) if self.bounds is not None else None
        if complaint:
            raise ConfigError([Problem(self.code, f"{self.flag} {shown(text)}: {complaint}",
                                       self.flag)])
        return value


number_argument = NumberArgument  # type=number_argument(CODE, "--flag", int, bounds=...)
