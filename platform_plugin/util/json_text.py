"""`dumps(value)`: JSON text as `json.dumps(value, default=str)` writes it, without importing
`json` (its package, decoder, scanner and encoder cost a launch ~3 ms to import, compiling its
regular expressions; job.json is written by every launch). Strings go through the same C
function json uses (`_json.encode_basestring_ascii`); numbers, constants and containers follow
json's rules (tests/util/test_json_text.py compares both on every kind of value).
"""
from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _string
except ImportError:  # pragma: no cover - an interpreter without the C accelerator
    from json.encoder import py_encode_basestring_ascii as _string

_CONSTANTS = {True: "true", False: "false", None: "null"}  # (1 and 0 are ints: checked first)
_INF = float("inf")


def dumps(value: object) -> str:
    if isinstance(value, str):
        return _string(value)
    if value is None or value is True or value is False:
        return _CONSTANTS[value]
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    return _string(str(value))  # json's default=str


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (_INF, -_INF):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key(key: object) -> str:
    """json's keys: strings; numbers, booleans and None as their JSON text, quoted."""
    if isinstance(key, str):
        return _string(key)
    if key is None or key is True or key is False:
        return '"' + _CONSTANTS[key] + '"'
    if isinstance(key, int):
        return '"' + int.__repr__(key) + '"'
    if isinstance(key, float):
        return '"' + _float(key) + '"'
    return _string(str(key))  # (json.dumps refuses other keys; job.json has none)
