"""The code stays runnable on Python 3.9 (checked statically here on any Python; `make
test-compat` runs the suite on a real 3.9)."""
from __future__ import annotations

from pathlib import Path

from tests.compat.floor import RANK_FLOOR, check_file, source_files

REPO = Path(__file__).resolve().parents[2]
# everything that runs under the package's supported Pythons: the package, the tests and
# their assets (ranks, notebooks' scripts), benchmarks, scripts, examples and templates
FOLDERS = ("platform_plugin", "tests", "bench", "scripts", "notebooks", "templates")


def test_sources_use_nothing_newer_than_python_39():
    problems = []
    for path in source_files(REPO, FOLDERS):
        package = path.relative_to(REPO).parts[0] == "platform_plugin"
        problems += check_file(path, require_future=package)
    assert not problems, "\n".join(str(p).replace(str(REPO) + "/", "") for p in problems)


BREAKS_ON_39 = '''\
import tomllib
from distutils.version import LooseVersion
from enum import StrEnum
import datetime
from dataclasses import dataclass
Alias = int | None
def f(a: int | None = None) -> str | None:
    flags = 1 | 2          # ints: fine
    merged = {} | {}       # dict merge: fine on 3.9
    isinstance(a, int | str)
    list(zip([1], [2], strict=True))
    return datetime.UTC
@dataclass(slots=True)
class A:
    x: int | None = None
'''


def test_the_check_finds_what_breaks_on_39(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(BREAKS_ON_39)
    found = {line.split(":", 2)[1] for line in check_file(sample)}
    # 1 tomllib, 2 distutils (gone in 3.12), 3 StrEnum, 6 alias, 7 annotation without the
    # future import, 10 isinstance, 11 zip(strict=), 12 datetime.UTC, 13 dataclass(slots=);
    # 8 and 9 are fine
    assert found == {"1", "2", "3", "6", "7", "10", "11", "12", "13"}
    sample.write_text("def g():\n    match 1:\n        case 1: pass\n")
    assert "not Python 3.9 syntax" in check_file(sample)[0]
    sample.write_text('"""doc"""\nx = 1\n')
    assert check_file(sample) == []
    assert "no `from __future__ import annotations`" in check_file(sample, require_future=True)[0]


def test_the_rank_side_uses_nothing_newer_than_python_37():
    from platform_plugin.launcher.planning.rank_path import rank_side_files
    problems = []
    for relative in rank_side_files():
        problems += check_file(REPO / "platform_plugin" / relative, require_future=True,
                               floor=RANK_FLOOR)
    assert not problems, "\n".join(str(p).replace(str(REPO) + "/", "") for p in problems)


BREAKS_ON_37 = '''\
from __future__ import annotations
from typing import Protocol
from importlib import metadata
import functools
from itertools import accumulate
def f(a, /, b: list[int] | None = None):
    if (n := len(b)) > 1:
        pass
    functools.cached_property
    list(accumulate([1], initial=0))
    return "x".removeprefix("y")
'''


def test_the_check_finds_what_breaks_on_37(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(BREAKS_ON_37.replace("a, /, b", "a, b").replace("(n := len(b))", "len(b)"))
    found = {line.split(":", 2)[1] for line in check_file(sample, floor=RANK_FLOOR)}
    # 2 Protocol, 3 importlib.metadata, 9 cached_property, 10 accumulate(initial=),
    # 11 removeprefix; 6's annotations are strings; all of it is fine on 3.9
    assert found == {"2", "3", "9", "10", "11"}
    assert check_file(sample) == []
    for line in ("a, /, b", "(n := len(b))"):
        sample.write_text(BREAKS_ON_37.replace("a, /, b", "a, b").replace("(n := len(b))", "len(b)")
                          .replace({"a, /, b": "a, b", "(n := len(b))": "len(b)"}[line], line))
        assert any("not Python 3.7 syntax" in problem
                   for problem in check_file(sample, floor=RANK_FLOOR)), line
