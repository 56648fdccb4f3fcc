"""util/json_text.dumps writes what json.dumps(value, default=str) writes (job.json's values)."""
from __future__ import annotations

import enum
import json
import math

import pytest

from platform_plugin.launcher.processes.result import JobStatus
from platform_plugin.util.json_text import dumps


class Level(enum.IntEnum):
    HIGH = 3


VALUES = [
    "", "plain", "quote \" backslash \\ slash /", "tab\tnewline\ncr\rnul\0bell\x07esc\x1b",
    "ünïcödé 调试环境 🚀", "\ud800 lone surrogate", "\u2028\u2029", JobStatus.FAILED,
    0, -1, 2**70, -(2**70), Level.HIGH, True, False, None,
    0.0, -0.0, 1.5, 1e300, 1e-300, 0.1 + 0.2, float("nan"), float("inf"), float("-inf"),
    [], {}, (), [1, "a", None, [2, [3, {}]]], ("t", 1),
    {"a": 1, "b": [1, 2], "c": {"d": None}}, {1: "int key", 2.5: "float key", True: "bool",
                                              None: "none", "s": JobStatus.HUNG},
    {JobStatus.TIMEOUT: "enum key"}, {Level.HIGH: "int enum key"},
    {"path": __import__("pathlib").Path("/tmp/x"), "exc": ValueError("bad")},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_text_is_what_json_writes(value):
    assert dumps(value) == json.dumps(value, default=str)


def test_what_is_written_reads_back():
    value = {"ranks": [{"env": {"X": "ü\n"}, "pid": 12, "ok": True, "t": 0.25}], "n": None}
    assert json.loads(dumps(value)) == value
    assert math.isnan(json.loads(dumps(float("nan"))))
