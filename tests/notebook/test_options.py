"""notebook/options.py: one record for `platform-run debug|full` and `run_notebook()`."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from platform_plugin.notebook.options import FIELDS, NotebookOptions, add_arguments, from_arguments


def parser(mode: str = "full") -> argparse.ArgumentParser:
    made = argparse.ArgumentParser()
    add_arguments(made, mode)
    return made


def test_no_flags_give_the_record_defaults():
    assert from_arguments(parser().parse_args([])) == NotebookOptions()


def test_the_flags_parse_into_the_record():
    args = parser().parse_args(["-p", "epochs", "3", "-p", "lr", "0.1", "-y", "{a: 1}",
                                "-y", "{b: 2}", "-f", "p.yaml", "--profile", "x.toml",
                                "--output", "o.ipynb", "--cwd", "C", "-k", "py", "--timeout", "5",
                                "--env-file", "e", "--verbose"])
    got = from_arguments(args)
    assert got.pairs == (("epochs", "3"), ("lr", "0.1"))
    assert got.parameters == {"a": 1, "b": 2}
    assert (got.params_file, got.profile, got.output, got.cwd, got.kernel, got.timeout,
            got.env_file, got.verbose) == ("p.yaml", "x.toml", "o.ipynb", "C", "py", 5.0, "e", True)


def test_the_help_names_the_mode_and_every_flag():
    text = parser("debug").format_help()
    assert "[debug.parameters]" in text
    for f in FIELDS.values():
        for flag in f.metadata["flags"]:
            assert flag in text, flag


def test_cleanup_follows_the_mode_unless_given():
    assert NotebookOptions().cleans("full") and not NotebookOptions().cleans("debug")
    assert not NotebookOptions(cleanup=False).cleans("full")


def test_run_notebook_keywords_are_the_record_fields():
    with pytest.raises(TypeError):
        NotebookOptions(verbos=True)
    assert {f.name for f in dataclasses.fields(NotebookOptions)} >= {"verbose", "cleanup"}


@pytest.mark.parametrize("field, code", [("output", "NB_OUTPUT"), ("cwd", "NB_CWD"),
                                         ("env_file", "CLI_PATH")])
def test_run_notebook_refuses_a_path_its_flag_refuses_before_anything_is_made(tmp_path, field,
                                                                              code):
    from platform_plugin.errors import ConfigError
    from platform_plugin.notebook.run import run_notebook
    (tmp_path / "nb.ipynb").write_text("{}")  # never read: the options are refused first
    with pytest.raises(ConfigError) as refused:
        run_notebook(tmp_path / "nb.ipynb", **{field: str(tmp_path / "a\nb")})
    assert refused.value.problems[0].code == code
    assert "control character" in str(refused.value) and "\n" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb.ipynb"]
