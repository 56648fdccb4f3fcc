"""The one reading of a number a user types (util/numbers.py) and the check of a path given on a
command line (util/paths.py): what the docs write is taken, everything Python's int()/float()
would also take is refused with a reason; a path no folder can be made at is refused by its
text alone, before anything is created."""
from __future__ import annotations

import math

import pytest

from platform_plugin.errors import ConfigError
from platform_plugin.util.numbers import Bounds, NumberArgument, decimal, whole
from platform_plugin.util.paths import PathArgument, path_problem


@pytest.mark.parametrize("text, value", [("0", 0), ("2", 2), ("-1", -1), ("007", 7),
                                         ("9" * 18, int("9" * 18))])
def test_whole_numbers_as_the_docs_write_them(text, value):
    assert whole(text) == value


@pytest.mark.parametrize("text", ["1_000", "\uff12", "\u0661\u0662", "+1", " 2", "2 ", "0x10",
                                  "1e3", "2.0", "", "-", "--1", "\u00b2", "9" * 19, "9" * 5000])
def test_whole_numbers_python_reads_but_no_doc_writes_are_refused(text):
    with pytest.raises(ValueError):
        whole(text)


@pytest.mark.parametrize("text, value", [("3", 3.0), ("2.5", 2.5), (".5", 0.5), ("5.", 5.0),
                                         ("1e3", 1000.0), ("-1", -1.0), ("1E-3", 0.001)])
def test_decimal_numbers_as_the_docs_write_them(text, value):
    assert decimal(text) == value


@pytest.mark.parametrize("text", ["1_0", "+1", " 2", "nan", "inf", "-inf", "1e999", "Infinity",
                                  "0x10", "\uff12", "", ".", "e3", "1e", "9" * 41])
def test_decimal_numbers_python_reads_but_no_doc_writes_are_refused(text):
    with pytest.raises(ValueError):
        decimal(text)


def test_inf_only_where_a_flag_says_so():
    assert decimal("inf", infinite=True) == math.inf
    with pytest.raises(ValueError):
        decimal("-inf", infinite=True)


def test_a_number_flag_refuses_with_its_code_and_its_range():
    port = NumberArgument("UI_PORT", "--port", int, bounds=Bounds(0, 65535))
    assert port("5000") == 5000
    for text, says in [("1_000", "is not a whole number"), ("70000", "between 0 and 65535")]:
        with pytest.raises(ConfigError) as err:
            port(text)
        assert err.value.problems[0].code == "UI_PORT" and says in str(err.value)
    with pytest.raises(ConfigError) as err:
        NumberArgument("X_WAIT", "--wait", bounds=Bounds(0, above=True))("0")
    assert "must be > 0" in str(err.value)


@pytest.mark.parametrize("text", ["", " ", "a\0b", "n" * 256, "a/" * 2048, "a/" * 300,
                                  "/" + "x" * 4095])
def test_paths_no_folder_can_be_made_at_are_refused_by_their_text(text):
    assert path_problem(text)
    with pytest.raises(ConfigError) as err:
        PathArgument("CLI_PATH", "--log-dir")(text)
    assert err.value.problems[0].code == "CLI_PATH" and len(str(err.value)) < 300


@pytest.mark.parametrize("text", ["logs", "/tmp/x", "~/x", "a/" * 200, "n" * 255, "训" * 85])
def test_paths_a_folder_can_be_made_at_pass(text):
    assert path_problem(text) is None
