"""Every path a command takes is checked on its text before anything is created: `clean
--root`, `init DIR`, `debug|full --output/OUT.ipynb/--cwd/--env-file` and env/doctor's
`--rank-table` and `--env-file` (before, `clean --root` of 5,000 characters or `init` of a
name over 255 bytes went on to the file system). Each bad value: exit 2, the flag's code,
nothing created, no traceback - through `main()` and through a real `platform-run` process."""
from __future__ import annotations

import json

import pytest

from tests.cli.helpers import run_inprocess, run_subprocess
from tests.cli.test_refusals import refused

BAD = {"empty": "", "blank": "  ", "nul": "a\0b", "over PATH_MAX": "x/" * 2500,
       "name over 255 bytes": "n" * 300, "300 levels": "/".join(["d"] * 300),
       "newline": "logs\nx", "escape": "\x1b[31mred", "DEL": "a\x7fb"}
CASES = [  # (argv before the value, argv after it, code)
    (["clean", "--dry-run", "--root"], [], "CLEAN_ROOT"),
    (["init"], [], "CLI_PATH"),
    (["debug", "nb.ipynb", "--dry-run", "--output"], [], "NB_OUTPUT"),
    (["full", "nb.ipynb", "--dry-run", "--no-cleanup", "--output"], [], "NB_OUTPUT"),
    (["debug", "nb.ipynb"], ["--dry-run"], "NB_OUTPUT"),  # the OUT.ipynb positional
    (["debug", "nb.ipynb", "--dry-run", "--cwd"], [], "NB_CWD"),
    (["full", "nb.ipynb", "--dry-run", "--no-cleanup", "--env-file"], [], "CLI_PATH"),
    (["env", "--rank-table"], [], "CLI_PATH"),
    (["doctor", "--rank-table"], [], "CLI_PATH"),
    (["env", "--env-file"], [], "CLI_PATH"),
    (["doctor", "--env-file"], [], "CLI_PATH"),
]


@pytest.fixture
def cwd(tmp_path, clean_environ):
    clean_environ.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))
    clean_environ.delenv("PLATFORM_CODE_DIR", raising=False)
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    return tmp_path


@pytest.mark.parametrize("before, after, code", CASES, ids=[" ".join(c[0][:2] + c[0][-1:]) for c in CASES])
@pytest.mark.parametrize("bad", BAD, ids=list(BAD))
def test_a_path_no_file_can_have_is_refused_before_anything_is_created(cwd, before, after, code, bad):
    outcome = run_inprocess([*before, BAD[bad], *after], cwd)
    refused(outcome, code)


@pytest.mark.parametrize("before, after, code", CASES, ids=[" ".join(c[0][:2] + c[0][-1:]) for c in CASES])
def test_the_platform_run_command_refuses_them_too(cwd, before, after, code):
    outcome = run_subprocess([*before, "n" * 300, *after], cwd)
    refused(outcome, code)
    assert "name of 300 bytes" in outcome.text, outcome.text


@pytest.mark.parametrize("argv, code", [
    (["launch", "--tracking", "none", "--nproc", "1", "--", "true"], "LAUNCH_PROJECT_FILE"),
    (["debug", "nb.ipynb", "--dry-run"], "NB_PROFILE"),
])
def test_a_platform_toml_nested_deeper_than_tomllib_parses_is_refused_not_a_recursion_error(cwd, argv, code):
    """tomllib parses `x = [[[...` recursively: 200,000 levels in platform.toml (well under its
    1 MiB bound) were a RecursionError traceback."""
    (cwd / "platform.toml").write_text("x = " + "[" * 200_000)
    outcome = run_inprocess(argv, cwd)
    refused(outcome, code)
    assert "deeper than Python parses" in outcome.text
