"""What the display keeps out of sight: MindSpore's networking chatter (see quiet.py's docstring
for both treatments of library chatter; `--verbose` shows it). The rank logs keep every byte."""
from __future__ import annotations

import re

# glog lines of MindSpore below ERROR from its networking: the DISTRIBUTED submodule (cluster
# connect/retry/register) and the collective-communication setup (ccsrc/.../collective/...)
CHATTER_LINE = re.compile(rb"\[(?:WARNING|INFO|DEBUG)\] (?:DISTRIBUTED\(|[A-Z_]+\([^)]*\):\S* "
                          rb"\[mindspore/ccsrc/[^\]]*collective)")
# every chatter line holds one of these: a chunk without them needs no regex at all
_MARK_1, _MARK_2 = (b"] DISTRIBUTED(", b"[mindspore/ccsrc/")


_NAME_END = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ_"  # what stands before the `(` of every chatter line
_PARENS_LOOKED_AT = 32  # more `(` than that in a chunk: the substring searches instead


class Chatter:
    """What the display hides. `search(chunk)`: could the chunk hold a chatter line (the display
    then `match`es each line, which anchors the pattern at the line's start). The cheap test
    matters: it runs over every byte a rank prints. A regex scan steps through the chunk byte
    by byte in Python's engine, the slowest test by far; `in` is CPython's substring search
    (not memchr). Every chatter line holds a `[` and a module name's `NAME(` (CHATTER_LINE):
    memchr for a `(` and a `[` answers for text without them, and a chunk with a few `(`
    (logging lines: `[INFO] ... (loss scale ...)`) is answered by looking at each `(`'s byte
    before it instead of two substring searches."""

    def search(self, chunk: bytes) -> bool:
        # memchr first; `in`, not any() over a generator (a rank that writes a line at a time
        # pays the generator per line)
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
                and CHATTER_LINE.search(chunk) is not None)

    def match(self, line: bytes) -> bool:
        return CHATTER_LINE.match(line) is not None


CHATTER = Chatter()


def hide_pattern(verbose: bool) -> Chatter | None:
    return None if verbose else CHATTER
