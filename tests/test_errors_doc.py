"""Every error code is listed once in docs/errors.md, and the table lists only codes the
package raises (found by reading the source, as a reviewer would grep for them)."""
from __future__ import annotations

import re

from tests.helpers import REPO

PREFIXES = ("CLEAN", "CLI", "COMPARE", "ENV", "INIT", "JOB", "LAUNCH", "MAGIC", "NB", "RT", "SERVER",
            "TRACKING", "UI")
NOT_CODES = {"JOB_ID"}  # the variable every rank gets, quoted in the source: no error code
CODE = re.compile(r"""["']((?:%s)_[A-Z0-9_]+)["']""" % "|".join(PREFIXES))
# check_writable_folder(folder, what, CODE, flag) raises CODE_NOT_DIR or CODE_READONLY
FOLDER = re.compile(r"""check_writable_folder\([^)]*?["']([A-Z0-9_]+)["']""", re.S)
FOLDER_SUFFIXES = ("_NOT_DIR", "_READONLY")


def codes_in_source() -> set[str]:
    codes, stems = set(), set()
    for path in (REPO / "platform_plugin").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        codes.update(CODE.findall(text))
        stems.update(FOLDER.findall(text))
    # a stem names two codes; it is a code itself only where it is also raised on its own
    alone = {c for c in stems if re.search(r"""(Problem\(|code=)\s*["']%s["']""" % c,
                                           _all_source())}
    return ((codes - stems) | alone | {s + x for s in stems for x in FOLDER_SUFFIXES}) - NOT_CODES


def _all_source() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "platform_plugin").rglob("*.py"))


def codes_in_docs() -> list[str]:
    text = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `([A-Z0-9_]+)` \|", text, re.M)


def test_every_code_is_listed_once_and_only_real_codes_are():
    listed = codes_in_docs()
    assert len(listed) == len(set(listed)), [c for c in listed if listed.count(c) > 1]
    assert set(listed) == codes_in_source()
