"""Notebook parameters: profile `platform.toml` < `-f params.yaml` < `-p NAME VALUE`.

`platform_mode` is injected last, so a notebook always knows which environment it runs in.
"""
from __future__ import annotations

import json
import keyword
from pathlib import Path
from typing import Any, Iterable

import yaml

from platform_plugin.errors import ConfigError
from platform_plugin.util.envfile import MAX_VARIABLE_BYTES, variable_bytes
from platform_plugin.util.regular_file import FileTooLarge, NotRegularFile, read_regular_file
from platform_plugin.util.toml import loads, tomllib

PROFILE_NAME = "platform.toml"


def parse_cli_value(value: str) -> Any:
    """Same typing as papermill's `-p`: True/False/None, ints and floats stay typed."""
    constants = {"True": True, "False": False, "None": None}
    if value in constants:
        return constants[value]
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return value


def load_profile(mode: str, profile: str | Path | None, project: Path) -> tuple[dict, Path | None]:
    """`[<mode>.parameters]` of the profile. An explicit --profile must exist; the default
    `<project>/platform.toml` is optional (but refused like an explicit one when it is there
    and not a small text file)."""
    path = Path(profile) if profile else project / PROFILE_NAME
    if not path.is_absolute():
        path = (Path.cwd() if profile else project) / path
    text = _read_input(path, "profile", "--profile", "NB_PROFILE")
    if text is None:
        if profile:
            raise ConfigError(f"profile {path} not found: pass an existing --profile file",
                              code="NB_PROFILE")
        return {}, None
    try:
        data = loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"profile {path} is not valid TOML: {exc}", code="NB_PROFILE")
    section = data.get(mode, {})
    parameters = section.get("parameters", {}) if isinstance(section, dict) else None
    if not isinstance(parameters, dict):
        raise ConfigError(f"profile {path}: [{mode}.parameters] must be a table of "
                          f"name = value, e.g. [{mode}.parameters] epochs = 3", code="NB_PROFILE")
    return dict(parameters), path


def load_params_file(path: str | Path | None) -> dict:
    if not path:
        return {}
    text = _read_input(Path(path), "parameters file", "-f", "NB_PARAMS")
    if text is None:
        raise ConfigError(f"parameters file {path} not found (-f)", code="NB_PARAMS")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"parameters file {path} is not valid YAML: {exc}", code="NB_PARAMS")
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(f"parameters file {path} must be a mapping of name: value",
                          code="NB_PARAMS")
    return data


# a profile or a -f file holds parameters, not data: a dataset or log given by mistake is refused
MAX_INPUT_BYTES = 1 << 20


def _read_input(path: Path, what: str, flag: str, code: str) -> str | None:
    """The text of a profile or -f file, None when there is none. Opened once (no exists()
    then read: it may change between the two), without blocking (a FIFO waits for a writer)
    and read with a bound (/dev/zero never ends)."""
    try:
        return read_regular_file(str(path), MAX_INPUT_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise ConfigError(f"{what} {path} is not a regular file (a folder, fifo, device or a "
                          f"link to one): pass a text file ({flag})", code=code)
    except FileTooLarge:
        raise ConfigError(f"{what} {path} is larger than {MAX_INPUT_BYTES >> 20} MiB: it holds "
                          f"parameters, not data ({flag})", code=code)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start}) ({flag})", code=code)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise ConfigError(f"{what} {path} cannot be read ({flag}): {exc}", code=code)


def parse_yaml_parameters(texts: Iterable[str]) -> dict:
    """papermill's `-y '{epochs: 3, lr: 0.1}'`: each a YAML mapping, later ones win."""
    merged: dict = {}
    for text in texts:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"-y {text!r} is not valid YAML: {exc}", code="NB_PARAMS")
        if data is None:
            continue
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            raise ConfigError(f"-y {text!r} must be a YAML mapping such as '{{epochs: 3}}'",
                              code="NB_PARAMS")
        merged.update(data)
    return merged


def merge_parameters(mode: str, profile: dict, from_file: dict,
                     pairs: Iterable[tuple[str, str]] = (), typed: dict | None = None
                     ) -> tuple[dict, dict[str, str]]:
    """Later sources win: profile < -f file < typed (Python API, -y) < -p pairs (typed like
    papermill's -p). Returns the parameters and where each came from."""
    parameters: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers = [("profile", profile), ("file", from_file), ("api", typed or {}),
              ("-p", {name: parse_cli_value(value) for name, value in pairs})]
    for source, values in layers:
        parameters.update(values)
        sources.update(dict.fromkeys(values, source))
    # `class = 3` in the injected cell would be a SyntaxError only after the kernel started
    bad = [name for name in parameters if not name.isidentifier() or keyword.iskeyword(name)]
    if bad:
        raise ConfigError(f"parameter names must be Python identifiers and not keywords "
                          f"(papermill assigns them as variables): {', '.join(map(repr, bad))}",
                          code="NB_PARAMS")
    parameters["platform_mode"] = mode
    sources["platform_mode"] = "injected"
    return parameters, sources


def parameters_json(parameters: dict, variable: str) -> str:
    """The parameters as JSON for the kernel's environment variable `variable`: one string,
    which Linux caps at 128 KiB (over it the kernel cannot start: 'Argument list too long').
    Measured while it is encoded, stopping at the bound: YAML aliases (`b: [*a, *a, ...]`,
    8 levels of 9 took 22 s and 1.8 GB written out whole) and an alias of itself cost no more
    than the bound."""
    chunks, size = [], variable_bytes(variable, "")
    try:
        for chunk in json.JSONEncoder(default=_unsupported).iterencode(parameters):
            size += len(chunk)  # ASCII (ensure_ascii): one byte a character
            if size > MAX_VARIABLE_BYTES:
                raise ConfigError(f"the parameters are over {MAX_VARIABLE_BYTES // 1024} KiB as "
                                  "JSON, what a process environment variable can hold (YAML "
                                  "aliases repeating a value?): pass a file name as the parameter "
                                  "and read the file in the notebook", code="NB_PARAMS")
            chunks.append(chunk)
    except _Unsupported as exc:  # papermill writes the parameters into the notebook's JSON
        names = [n for n, v in parameters.items() if v is exc.value] or ["a parameter"]
        raise ConfigError(f"{names[0]} holds a {type(exc.value).__name__} ({exc.value!r:.60}): "
                          "papermill passes strings, numbers, true/false, null, lists and "
                          "mappings. Quote it (a TOML or YAML date is not a string)",
                          code="NB_PARAMS") from None
    except ValueError as exc:  # json's "Circular reference detected": `a: &a [*a]`
        raise ConfigError(f"the parameters cannot be written as JSON ({exc}): a YAML alias "
                          "inside its own anchor?", code="NB_PARAMS") from None
    return "".join(chunks)


class _Unsupported(TypeError):
    def __init__(self, value: Any) -> None:
        super().__init__(type(value).__name__)
        self.value = value


def _unsupported(value: Any) -> Any:
    """json's `default`: a TOML/YAML date or time, a YAML set or binary is refused here, before
    the run: papermill would fail on it once the run had started ("TypeError: Object of type
    datetime is not JSON serializable")."""
    raise _Unsupported(value)
