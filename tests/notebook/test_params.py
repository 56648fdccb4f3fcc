"""Parameters: profile < -f < -p, typed like papermill's -p; profile and file errors."""
from __future__ import annotations

import os
import signal

import pytest

from platform_plugin.errors import ConfigError
from platform_plugin.notebook.params import (load_params_file, load_profile, merge_parameters,
    parse_cli_value)


@pytest.mark.parametrize("raw, value", [
    ("3", 3), ("-2", -2), ("0.5", 0.5), ("1e3", 1000.0), ("True", True), ("False", False),
    ("None", None), ("true", "true"), ("data/full", "data/full"), ("", ""), ("3 epochs", "3 epochs"),
])
def test_cli_values_are_typed_like_papermill(raw, value):
    parsed = parse_cli_value(raw)
    assert parsed == value and type(parsed) is type(value)


def test_precedence_profile_then_file_then_api_then_cli():
    params, sources = merge_parameters(
        "full", {"epochs": 1, "data": "sample", "lr": 0.1, "seed": 7},
        {"epochs": 2, "data": "file"}, [("epochs", "3")], {"data": "api", "lr": 0.2})
    assert params == {"epochs": 3, "data": "api", "lr": 0.2, "seed": 7, "platform_mode": "full"}
    assert sources == {"epochs": "-p", "data": "api", "lr": "api", "seed": "profile",
                       "platform_mode": "injected"}


def test_platform_mode_cannot_be_overridden():
    params, _ = merge_parameters("debug", {"platform_mode": "full"}, {}, [("platform_mode", "x")])
    assert params["platform_mode"] == "debug"


def test_parameter_names_must_be_identifiers():
    with pytest.raises(ConfigError, match="'bad-name'"):
        merge_parameters("debug", {}, {"bad-name": 1}, [])


@pytest.mark.parametrize("name", ["class", "None", "lambda"])
def test_parameter_names_must_not_be_keywords(name):
    """`class = 3` in the injected cell failed as a SyntaxError only after the kernel started."""
    with pytest.raises(ConfigError, match=repr(name)):
        merge_parameters("debug", {}, {}, [(name, "3")])


def test_a_params_file_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "params.yaml"
    os.mkfifo(fifo)

    def hang(signum, frame):
        raise TimeoutError("reading the FIFO blocked")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    try:
        with pytest.raises(ConfigError, match="not a regular file"):
            load_params_file(str(fifo))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_profile_reads_the_mode_section(tmp_path):
    (tmp_path / "platform.toml").write_text(
        '[debug.parameters]\nepochs = 1\n[full.parameters]\nepochs = 30\ndata = "/data/full"\n'
        '[other]\nx = 1\n')
    assert load_profile("full", None, tmp_path)[0] == {"epochs": 30, "data": "/data/full"}
    assert load_profile("debug", None, tmp_path) == ({"epochs": 1}, tmp_path / "platform.toml")


def test_default_profile_is_optional_but_an_explicit_one_must_exist(tmp_path):
    assert load_profile("debug", None, tmp_path) == ({}, None)
    with pytest.raises(ConfigError) as info:
        load_profile("debug", str(tmp_path / "missing.toml"), tmp_path)
    assert info.value.problems[0].code == "NB_PROFILE"


@pytest.mark.parametrize("text", ["[full\nepochs=1", "full = 3", "[full]\nparameters = 3"])
def test_bad_profile_is_a_config_error(tmp_path, text):
    (tmp_path / "platform.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_profile("full", None, tmp_path)
    assert info.value.problems[0].code == "NB_PROFILE"


def test_params_file(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("epochs: 4\nnames: [a, b]\n")
    assert load_params_file(str(path)) == {"epochs": 4, "names": ["a", "b"]}
    path.write_text("")
    assert load_params_file(str(path)) == {}
    for bad in ("- 1\n- 2\n", "a: [1\n"):
        path.write_text(bad)
        with pytest.raises(ConfigError) as err:
            load_params_file(str(path))
        assert [p.code for p in err.value.problems] == ["NB_PARAMS"], bad
    with pytest.raises(ConfigError, match="not found"):
        load_params_file(str(tmp_path / "nope.yaml"))


def test_a_profile_that_is_a_fifo_or_folder_is_named_as_such(tmp_path):
    """It said 'not found' about a file that exists."""
    os.mkfifo(tmp_path / "fifo.toml")
    for name in ("fifo.toml", "."):
        with pytest.raises(ConfigError, match="is not a regular file"):
            load_profile("debug", str(tmp_path / name), tmp_path)


def _hostile(path, kind: str) -> None:
    if kind == "dev-zero-link":
        path.symlink_to("/dev/zero")  # never ends: read with a bound
    elif kind == "huge":
        path.write_bytes(b"# a log given by mistake\n" * 50_000)  # 1.2 MiB
    elif kind == "fifo":
        os.mkfifo(path)  # opening it must not wait for a writer
    else:
        path.write_bytes(b"epochs = 1\n\xff\xfe\n")


@pytest.mark.parametrize("kind, says", [("dev-zero-link", "not a regular file"),
                                        ("huge", "larger than 1 MiB"), ("fifo", "not a regular file"),
                                        ("not-utf8", "not UTF-8")])
@pytest.mark.parametrize("which", ["--profile", "default profile", "-f"])
def test_a_profile_or_params_file_that_is_not_a_small_text_file_is_refused_with_a_code(
        tmp_path, which, kind, says):
    path = tmp_path / ("params.yaml" if which == "-f" else "platform.toml")
    _hostile(path, kind)
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the read blocked"))
    signal.alarm(10)
    try:
        with pytest.raises(ConfigError, match=says) as info:
            if which == "-f":
                load_params_file(str(path))
            else:
                load_profile("debug", str(path) if which == "--profile" else None, tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert info.value.problems[0].code == ("NB_PARAMS" if which == "-f" else "NB_PROFILE")
