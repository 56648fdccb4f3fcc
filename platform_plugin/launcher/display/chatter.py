"""What the display keeps out of sight: MindSpore's networking chatter (see quiet.py's docstring
for both treatments of library chatter; `--verbose` shows it). The rank logs keep every byte.

Imported with the output, after the ranks were spawned (start-up time without .pyc)."""
from __future__ import annotations

import re

# glog lines of MindSpore below ERROR from its networking: the DISTRIBUTED submodule (cluster
# connect/retry/register) and the collective-communication setup (ccsrc/.../collective/...).
# compiled at the first chunk that holds a mark (_Chatter.regex): most jobs never need it
CHATTER_LINE = (rb"\[(?:WARNING|INFO|DEBUG)\] (?:DISTRIBUTED\(|[A-Z_]+\([^)]*\):\S* "
                rb"\[mindspore/ccsrc/[^\]]*collective)")
# every chatter line holds one of these: a chunk without them needs no regex at all
_CHATTER_MARKS = _MARK_1, _MARK_2 = (b"] DISTRIBUTED(", b"[mindspore/ccsrc/")


_NAME_END = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ_"  # what stands before the `(` of every chatter line
_PARENS_LOOKED_AT = 32  # more `(` than that in a chunk: the substring searches instead


class _Chatter:
    """What the display hides. `search(chunk)`: could the chunk hold a chatter line (the display
    then `match`es each line, which anchors the pattern at the line's start). The cheap test
    matters: it runs over every byte a rank prints. A regex scan steps through the chunk byte
    by byte in Python's engine (with a `^` and re.M it was the launcher's largest cost on a
    chatty rank, ~400 us per 64 KiB); `in` is 15-60 us per mark and 64 KiB (CPython's
    substring search, not memchr). Every chatter line holds a `[` and a module name's `NAME(`
    (CHATTER_LINE): memchr for a `(` and a `[` (~1-3 us) answers for text without them, and a
    chunk with a few `(` (logging lines: `[INFO] ... (loss scale ...)`) is answered by looking
    at each `(`'s byte before it (~0.3 us each) instead of two substring searches."""

    regex = None

    def search(self, chunk: bytes) -> bool:
        # memchr first; `in`, not any() over a generator (~1 us more a chunk: a rank that
        # writes a line at a time pays it per line)
        if b"(" not in chunk or b"[" not in chunk:
            return False
        at = chunk.find(b"(")
        for _ in range(_PARENS_LOOKED_AT):
            if at < 0:
                return False  # no `(` after a name: no chatter line
            if chunk[at - 1:at] in _NAME_END:  # b"" (a `(` first) is `in` too: looked at
                break
            at = chunk.find(b"(", at + 1)
        return ((_MARK_1 in chunk or _MARK_2 in chunk)
                and self._regex().search(chunk) is not None)

    def match(self, line: bytes) -> bool:
        return self._regex().match(line) is not None

    def _regex(self):
        if self.regex is None:
            self.regex = re.compile(CHATTER_LINE)
        return self.regex


CHATTER = _Chatter()


def hide_pattern(verbose: bool):
    return None if verbose else CHATTER
