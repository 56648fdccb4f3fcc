"""Whole numbers read from text a user controls (rank tables, .env, variables, /proc).

Python refuses int() of a string over 4,300 digits with a ValueError, and no rank, device,
port or count needs more than a few digits: one bounded reader keeps a hostile or broken
file a clean refusal instead of a traceback.
"""
from __future__ import annotations

MAX_DIGITS = 18  # fits a signed 64-bit integer; far beyond any rank, device or port


def whole_number(text: object) -> int | None:
    """`text` as a non-negative int when it is 1..MAX_DIGITS ASCII digits (surrounding blanks
    allowed), else None: the caller reports it with its own code and path."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not text or len(text) > MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def too_long(text: object) -> bool:
    """A digit string refused only for its length (the message can say so)."""
    return isinstance(text, str) and len(text.strip()) > MAX_DIGITS and text.strip().isdigit()
