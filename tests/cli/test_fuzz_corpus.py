"""The fuzz corpus (tests/cli/corpus.py, 800+ cases) through `platform-run`: 0 tracebacks,
0 hangs, every refusal exit 2 with an error code, nothing created in the working folder.

All cases run in-process through `platform_plugin.cli.main` (captured output, an alarm for
hangs); a sample also runs as real subprocesses, where a traceback or a hang looks exactly as
a user would see it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli import corpus
from tests.cli.helpers import CODE, Outcome, run_inprocess, run_subprocess
from tests.helpers import clean_env

CASES = corpus.build()
# (a NUL byte cannot be passed to a process: exec refuses it before the command runs)
SUBPROCESS_SAMPLE = [case for case in CASES if not any("\0" in arg for arg in case.argv)][::110]


def _prepare(folder: Path, case: corpus.Case) -> None:
    folder.mkdir(parents=True)
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)  # "adir/x": a folder holding a file
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
        else:
            path.write_text(json.dumps(content))


def problem_of(case: corpus.Case, got: Outcome) -> str:
    """'' when the outcome is acceptable, else what is wrong with it."""
    if got.traceback or "Traceback (most recent call last)" in got.text:
        return f"traceback: {(got.traceback or got.text)[-600:]}"
    if got.created:
        return f"created {got.created[:5]}"
    if got.rc == 1 and case.argv[:1] == ["doctor"] and "FAIL" in got.text:
        return ""  # the doctor reports failed checks with exit 1: a diagnosis, not a refusal
    if got.rc not in (0, 2):
        return f"exit {got.rc} (a bad input is exit 2): {got.text[-300:]}"
    if got.rc == 2 and not CODE.search(got.text):
        return f"exit 2 without an error code: {got.text[-300:]}"
    if case.expect == "refuse" and got.rc != 2:
        return f"not refused (exit {got.rc}): {got.text[-300:]}"
    if case.code and f"[{case.code}]" not in got.text:
        return f"refused without [{case.code}]: {got.text[-300:]}"
    if case.code and len(got.err.strip().splitlines()) > 2:  # the headline and the problem
        return f"more than the problem's one line: {got.err[-300:]}"
    return ""


def test_corpus_is_large_enough():
    assert len(CASES) >= 800
    kinds = {c.id.split("-")[0] for c in CASES}
    assert {"ranktable", "env", "launch", "notebook", "ui"} <= kinds


def test_every_case_in_process(tmp_path, clean_environ):
    failures = []
    for n, case in enumerate(CASES):
        folder = tmp_path / f"c{n}"
        _prepare(folder, case)
        clean_environ.setenv("PLATFORM_CACHE_DIR", str(folder / "cache"))
        got = run_inprocess(list(case.argv), folder)
        problem = problem_of(case, got)
        if problem:
            failures.append(f"{case.id} {case.argv[:6]}: {problem}".replace("\n", " | "))
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures[:40])


@pytest.mark.parametrize("case", SUBPROCESS_SAMPLE, ids=lambda c: c.id)
def test_a_sample_as_real_subprocesses(tmp_path, case):
    folder = tmp_path / "case"
    _prepare(folder, case)
    got = run_subprocess(list(case.argv), folder,
                         clean_env(PLATFORM_CACHE_DIR=str(folder / "cache")))
    assert not problem_of(case, got), (case.id, problem_of(case, got))
