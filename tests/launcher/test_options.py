"""launcher/options.py: the one options record, the flags generated from it, and every refusal
(a ConfigError with a code, before any folder or process exists)."""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import typing

import pytest

from platform_plugin import launch
from platform_plugin.errors import ConfigError
from platform_plugin.launcher import options as opts_mod
from platform_plugin.launcher.planning.backends import BACKENDS
from platform_plugin.launcher.keywords import LaunchKeywords, from_kwargs
from platform_plugin.launcher.options import (FIELDS, LaunchOptions, add_arguments, from_arguments,
    render_help)
from tests.helpers import REPO, VENV_BIN, clean_env
from tests.launcher.helpers import PY


def code_of(excinfo) -> str:
    return excinfo.value.problems[0].code


def test_backend_choices_are_the_registered_backends():
    assert opts_mod.BACKEND_CHOICES == ("auto", *BACKENDS)


def test_every_cli_option_is_a_flag_and_parses_back_to_the_record():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {s for a in parser._actions for s in a.option_strings}
    for name, f in FIELDS.items():
        assert f.metadata["help"], name
        assert (opts_mod.flags_of(name)[0] in flags) == f.metadata["cli"], name
    # nothing given: exactly the record's defaults (the parser declares no defaults of its own)
    assert from_arguments(parser.parse_args(["--", "x"])) == LaunchOptions()
    args = parser.parse_args(["--nproc", "3", "--grace", "0.5", "--kill-stale",
                              "--max-lines-per-sec", "7", "--", "python", "t.py"])
    got = from_arguments(args)
    assert (got.nproc, got.grace, got.kill_stale, got.max_lines_per_s) == (3, 0.5, True, 7.0)


def test_the_help_lists_every_flag_with_its_default_and_choices():
    text = render_help("%dist_run")
    for name, f in FIELDS.items():
        if f.metadata["cli"]:
            assert opts_mod.flags_of(name)[0] in text
    assert "default 3" in text and "ms-cluster" in text and "wflogger" in text


def test_the_docs_list_every_option():
    text = (REPO / "docs" / "launch.md").read_text()
    for name, f in FIELDS.items():
        assert f"`{name}`" in text, name
        if f.metadata["cli"]:
            assert f"`{opts_mod.flags_of(name)[0]}" in text, name


def test_unknown_keyword_suggests_the_closest_name():
    with pytest.raises(ConfigError) as err:
        from_kwargs({"nprocs": 2})
    assert code_of(err) == "LAUNCH_UNKNOWN_OPTION" and "did you mean 'nproc'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        from_kwargs({"zzzz": 1})
    assert code_of(err) == "LAUNCH_UNKNOWN_OPTION" and "the options are" in str(err.value)


def test_aliases_map_to_their_field(monkeypatch):
    original = FIELDS["nproc"]
    aliased = dataclasses.field(default=original.default, metadata=dict(
        original.metadata, aliases=("nproc_per_node",)))
    aliased.name, aliased.type = "nproc", original.type
    monkeypatch.setitem(FIELDS, "nproc", aliased)
    assert from_kwargs({"nproc_per_node": 4}).nproc == 4
    with pytest.raises(ConfigError) as err:
        from_kwargs({"nproc_per_node": 4, "nproc": 2})
    assert code_of(err) == "LAUNCH_UNKNOWN_OPTION"


def test_launch_keywords_list_every_option_with_its_type():
    """`launch(cmd, **options: Unpack[LaunchKeywords])`: what an IDE shows is the record."""
    keywords = typing.get_type_hints(LaunchKeywords)
    record = typing.get_type_hints(LaunchOptions)
    aliases = {a: f.name for f in FIELDS.values() for a in f.metadata["aliases"]}
    assert set(keywords) == set(record) | set(aliases)
    for name, kind in keywords.items():
        assert kind == record[aliases.get(name, name)], name


def test_an_option_not_given_takes_its_variable():
    given = opts_mod.with_environment(LaunchOptions(log_dir="a"), {"PLATFORM_LOG_DIR": "b",
                                                                   "PLATFORM_JOB_ID": "j"})
    assert (given.log_dir, given.job_id, given.cache_dir) == ("a", "j", None)
    assert "else PLATFORM_LOG_DIR" in FIELDS["log_dir"].metadata["help"]


@pytest.mark.parametrize("kw, code", [
    (dict(grace=float("nan")), "LAUNCH_TIMEOUT"),
    (dict(grace=-1), "LAUNCH_TIMEOUT"),
    (dict(timeout=float("nan")), "LAUNCH_TIMEOUT"),
    (dict(timeout=float("inf")), "LAUNCH_TIMEOUT"),
    (dict(timeout=-5), "LAUNCH_TIMEOUT"),
    (dict(silence_timeout=0), "LAUNCH_TIMEOUT"),
    (dict(max_lines_per_s=float("nan")), "LAUNCH_BAD_VALUE"),
    (dict(master_port=0), "LAUNCH_MASTER_PORT"),
    (dict(master_port=65536), "LAUNCH_MASTER_PORT"),
    (dict(nproc=0), "LAUNCH_NPROC"),
    (dict(nproc=99999999999), "LAUNCH_NPROC"),
    (dict(nproc=2.0), "LAUNCH_NPROC"),
    (dict(nproc=True), "LAUNCH_NPROC"),
    (dict(show="rank0"), "LAUNCH_BAD_SHOW"),
    (dict(show=""), "LAUNCH_BAD_SHOW"),
    (dict(backend="bogus"), "LAUNCH_BACKEND"),
    (dict(tracking="mlfow"), "LAUNCH_BAD_VALUE"),
    (dict(node_rank=-1), "LAUNCH_NODE_RANK"),
    (dict(job_name="a/b"), "LAUNCH_JOB_NAME"),
    (dict(job_name="a\x00b"), "LAUNCH_JOB_NAME"),
    (dict(job_id="j" * 129), "LAUNCH_JOB_ID"),
    (dict(job_id="a\nb"), "LAUNCH_JOB_ID"),
    (dict(log_dir=""), "LAUNCH_PATH"),
    (dict(log_dir="a/" * 2500), "LAUNCH_PATH"),
    (dict(cache_dir="n" * 256), "LAUNCH_PATH"),
    (dict(checkpoint_dir="a\x00b"), "LAUNCH_PATH"),
    (dict(cwd="a/" * 300), "LAUNCH_PATH"),
    (dict(env={"A": 1}), "LAUNCH_BAD_VALUE"),
])
def test_bad_values_are_refused_with_a_code(kw, code):
    with pytest.raises(ConfigError) as err:
        LaunchOptions(**kw)
    assert code_of(err) == code


def test_launch_refuses_before_anything_exists(tmp_path):
    with pytest.raises(ConfigError) as err:
        launch([PY, "-c", "pass"], nproc=2, tracking="none", log_dir=str(tmp_path / "logs"),
               grace=float("nan"))
    assert code_of(err) == "LAUNCH_TIMEOUT"
    with pytest.raises(ConfigError) as err:  # a rank this job does not have
        launch([PY, "-c", "pass"], nproc=2, tracking="none", log_dir=str(tmp_path / "logs"),
               show="5", backend="plain")
    assert code_of(err) == "LAUNCH_BAD_SHOW"
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("flags, code", [
    (["--grace", "nan"], "LAUNCH_TIMEOUT"),
    (["--timeout", "nan"], "LAUNCH_TIMEOUT"),
    (["--silence-timeout", "nan"], "LAUNCH_TIMEOUT"),
    (["--max-lines-per-sec", "nan"], "LAUNCH_BAD_VALUE"),
    (["--nproc", "99999999999"], "LAUNCH_NPROC"),
    (["--nproc", "two"], "LAUNCH_NPROC"),
    (["--master-port", "70000"], "LAUNCH_MASTER_PORT"),
])
def test_cli_refusals_exit_2_with_the_code(tmp_path, flags, code):
    logs = tmp_path / "logs"
    proc = subprocess.run([str(VENV_BIN / "platform-run"), "launch", "--nproc", "2", "--tracking", "none",
                           "--log-dir", str(logs), *flags, "--", PY, "-c", "pass"],
                          capture_output=True, text=True, env=clean_env(), timeout=60)
    assert proc.returncode == 2 and f"[{code}]" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not logs.exists()


def test_a_value_of_the_wrong_type_is_refused_in_a_sentence():
    """Not Python's words ("must be int"): what was given and what to give."""
    with pytest.raises(ConfigError) as err:
        LaunchOptions(nproc="2")
    assert "--nproc is '2' (text): give a whole number instead" in str(err.value)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ConfigError) as err:
        parser.parse_args(["--timeout", "soon", "--", "x"])
    assert "--timeout 'soon' is not a number: give one, e.g. --timeout 2.5" in str(err.value)
    assert "must be" not in str(err.value)


@pytest.mark.parametrize("text", ["1_000", "\uff12", "+1", " 2", "2 ", "0x10", "1e3", "2.0", "",
                                  "9" * 19])
def test_a_whole_number_flag_takes_ascii_digits_only(text):
    """int() took all of these: `--nproc 1_000` started 1,000 ranks."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ConfigError) as err:
        parser.parse_args(["--nproc", text, "--", "x"])
    assert code_of(err) == "LAUNCH_NPROC"
    assert "is not a whole number" in str(err.value) and "\n" not in str(err.value)


def test_an_option_from_its_variable_is_refused_naming_the_variable():
    with pytest.raises(ConfigError) as err:
        opts_mod.with_environment(LaunchOptions(), {"PLATFORM_JOB_ID": "j" * 120_000})
    assert code_of(err) == "LAUNCH_JOB_ID"
    text = str(err.value)
    assert "PLATFORM_JOB_ID" in text and "120000 bytes" in text and len(text) < 400
