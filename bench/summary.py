"""Every goal's verdict line, collected from the sections of docs/benchmarks.md into the
`summary` section at its top (run last by `make bench`, after every section was written).

    .venv/bin/python bench/summary.py

A verdict line is one that names a goal and says whether it is met (`meets`, `misses`,
`MISSES`); each section's own text stays the source: nothing here is measured or typed by hand.
"""
from __future__ import annotations

import re

from benchdoc import BENCH_DOC, write_section  # bench/benchdoc.py

SECTION = re.compile(r"<!-- bench:([\w-]+):start -->(.*?)<!-- bench:\1:end -->", re.S)
VERDICT = re.compile(r"\b(meets|misses|MISSES)\b")


def verdict_lines(text: str) -> list[tuple[str, str]]:
    """(section, line) for each verdict line, in the document's order."""
    found = []
    for name, body in SECTION.findall(text):
        if name == "summary":
            continue
        for line in body.splitlines():
            line = line.strip().lstrip("- ").strip()
            if re.search(r"\bgoal\b", line, re.I) and VERDICT.search(line) \
                    and not line.startswith("Where the time goes"):
                found.append((name, line))
    return found


def summary(text: str) -> str:
    lines = verdict_lines(text)
    missed = sum(1 for _, line in lines if re.search(r"\b(misses|MISSES)\b", line))
    return "\n".join([
        "## summary", "",
        f"Every goal's verdict as its section below states it ({len(lines)} lines, "
        f"{missed} with a miss); each section names its command, time and load.", "",
        *[f"- **{name}**: {line}" for name, line in lines],
    ])


def main() -> None:
    text = BENCH_DOC.read_text(encoding="utf-8")
    body = summary(text)
    write_section("summary", body)
    print(body)


if __name__ == "__main__":
    main()
