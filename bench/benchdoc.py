"""Writes one benchmark's latest results into docs/benchmarks.md, between its own markers.

Every benchmark replaces only its section; the file is re-read right before writing since
other benchmarks write theirs too.
"""
from __future__ import annotations

from pathlib import Path

BENCH_DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(name: str, body: str, doc: Path = BENCH_DOC) -> None:
    """`body` starts with its own `## name` heading."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    block = f"{start}\n{body.strip()}\n{end}"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + f"\n\n{block}\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")
