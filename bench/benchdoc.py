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


def read_section(name: str, doc: Path = BENCH_DOC) -> str:
    """A section's current body (its `## name` heading included), "" when it has none yet: for
    a bench that re-runs only some of its parts and keeps the others' text."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if start not in text or end not in text:
        return ""
    return text[text.index(start) + len(start):text.index(end)].strip()


def alternate(sides: dict, rounds: int) -> dict[str, list[float]]:
    """Time every side `rounds` times, alternating their order each round (ABBA...), so a noisy
    machine's slow phase hurts both sides alike. `sides`: name -> zero-argument callable; what
    it returns, if callable, is run after the clock stopped (the bench's own checks, cleanup)."""
    import time
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # one warm-up each (page cache, imports), not counted
        _after(sides[name]())
    for round_no in range(rounds):
        for name in (names if round_no % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            after = sides[name]()
            times[name].append(time.perf_counter() - start)
            _after(after)
    return times


def _after(after) -> None:
    if callable(after):
        after()


def spread(values: list[float], unit: str = "s", scale: float = 1.0, digits: int = 3) -> str:
    """`median (min–max)` of a list of timings."""
    import statistics
    med = statistics.median(values) * scale
    return f"{med:.{digits}f} ({min(values) * scale:.{digits}f}–{max(values) * scale:.{digits}f}) {unit}"


def load_text() -> str:
    """The machine's load when the benchmark ran (1, 5, 15-minute averages) and its cores."""
    import os
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} cores"
