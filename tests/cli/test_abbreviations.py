"""No parser of the package takes an abbreviation for a flag (`--time` is not `--timeout`): a
future option starting the same way must not change what an old command line or cell means
(msrun's `--worker` became ambiguous that way). The rank's own argv is never parsed as ours."""
from __future__ import annotations

import argparse

import pytest

from platform_plugin.magics import dist_run as magic, tools as magic_tools
from platform_plugin.cli import COMMANDS, build_parser
from platform_plugin.errors import ConfigError
from platform_plugin.launcher.options import render_help
from tests.cli.helpers import run_inprocess, run_subprocess


def _every_parser(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _every_parser(child)


@pytest.mark.parametrize("command", sorted({name for name, _m, _h in COMMANDS}))
def test_every_cli_parser_refuses_abbreviations(command):
    parsers = list(_every_parser(build_parser([command])))
    assert len(parsers) >= 2  # the top level and the command's own
    assert [p.prog for p in parsers if p.allow_abbrev] == []


def test_the_magics_parsers_refuse_abbreviations():
    parsers = [magic._parser(), magic_tools._compare_parser(), magic_tools._clean_parser()]
    assert [p.prog for p in parsers if p.allow_abbrev] == []
    assert "--timeout" in render_help()  # its throwaway parser is built the same way


@pytest.mark.parametrize("argv, meant", [
    (["launch", "--time", "5", "--", "python", "-c", "pass"], "--timeout"),
    (["launch", "--nproc=1", "--track", "none", "--", "python", "-c", "pass"], "--tracking"),
    (["clean", "--dry", "--root", "."], "--dry-run"),
    (["ranktable", "check", "--jso", "table.json"], "--json"),  # a sub-command's sub-command
])
def test_an_abbreviated_flag_is_refused_with_the_full_one_suggested(tmp_path, clean_environ,
                                                                    argv, meant):
    outcome = run_inprocess(argv, tmp_path)
    assert outcome.refused_cleanly(), outcome
    assert "[CLI_USAGE]" in outcome.err and f"did you mean {meant}?" in outcome.err, outcome.err


def test_an_abbreviated_flag_in_dist_run_is_refused():
    with pytest.raises(ConfigError) as caught:
        magic._parser().parse_args(["--time", "5", "python", "x.py"])
    assert "[LAUNCH_BAD_OPTION]" in str(caught.value)
    assert "did you mean --timeout?" in str(caught.value)
    # after the command's first word every flag is the rank's own, as in the CLI
    args = magic._parser().parse_args(["--nproc", "2", "python", "x.py", "--time", "5", "--nproc"])
    assert args.nproc == 2 and args.command == ["python", "x.py", "--time", "5", "--nproc"]


def test_the_ranks_own_flags_are_never_taken_as_the_launchers(tmp_path):
    """After the first positional (or `--`) every word is the rank's: its `--time`, `--nproc`,
    `--timeout` reach it unchanged, abbreviations of ours or not (a real launch)."""
    script = "import sys; print('ARGV', sys.argv[1:])"
    rank_args = ["--time", "5", "--nproc", "3", "--timeout=1", "--", "--tracking", "mlflow"]
    for how in (["python", "-c", script], ["--", "python", "-c", script]):
        outcome = run_subprocess(["launch", "--tracking", "none", "--nproc", "1", *how,
                                  *rank_args], tmp_path)
        assert outcome.rc == 0, outcome
        assert f"ARGV {rank_args!r}" in outcome.out, outcome.out
        assert "1 rank(s) of 1" in outcome.out
