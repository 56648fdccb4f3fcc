"""What a rank on another interpreter imports from the job's cache (launcher/planning/
rank_path.py) is exactly the launcher's copy, in a folder only this user can change: a planted
`rank-side/` - world-writable, another user's, holding a link out of the cache, a
sitecustomize.py and a stale unchecked-hash .pyc of a forged tracker - is replaced, never
imported nor written through; a job cache folder of another user is refused before anything is
copied. Real launches: the ranks run on a venv of this Python that has no platform_plugin (the
copy route, forced without 3.7) and, marked py37, on the Python 3.7 venv."""
from __future__ import annotations

import os
import stat
import subprocess
import venv
from pathlib import Path

import pytest

from platform_plugin.errors import ConfigError
from platform_plugin.launcher import launch
from tests import helpers

NOBODY = 65534  # another user (root runs the suite here: it can hand files to anyone)
JOB_ID = "planted-20260101-000000-abcd"
RANK = """\
import platform_plugin
from platform_plugin.checkpoint import manifest  # the rank side's own reader comes along
from platform_plugin.tracking.rank import tracker
print("rank side from", platform_plugin.__file__, flush=True)
"""
FORGED = "raise SystemExit('PLANTED tracker ran')\n"
PYC = """\
import importlib.util, py_compile, sys
source, module = sys.argv[1:]
py_compile.compile(source, cfile=importlib.util.cache_from_source(module),
                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
"""


@pytest.fixture(params=["a venv without the plugin", pytest.param("3.7", marks=pytest.mark.py37)])
def foreign_python(request, tmp_path_factory) -> str:
    if request.param == "3.7":
        return helpers.python37()
    folder = tmp_path_factory.mktemp("venv")
    venv.create(folder, with_pip=False, symlinks=True)
    return str(folder / "bin" / "python")


@pytest.fixture
def bare(clean_environ, tmp_path):
    """No PYTHONPATH to this checkout: the ranks' interpreter cannot import platform_plugin."""
    clean_environ.delenv("PYTHONPATH", raising=False)
    clean_environ.chdir(tmp_path)
    (tmp_path / "rank.py").write_text(RANK)
    return tmp_path


def plant_rank_side(python: str, side: Path, victim: Path, marker: Path) -> None:
    """A `rank-side/` as a stranger leaves it: a link where the copy writes errors.py, a
    sitecustomize.py, an unchecked-hash .pyc (loaded whatever its source says) of a forged
    tracker beside the forged source, all world-writable and another user's."""
    package = side / "platform_plugin"
    (package / "tracking" / "rank").mkdir(parents=True)
    (package / "errors.py").symlink_to(victim)
    (side / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    forged = package / "tracking" / "rank" / "tracker.py"
    forged.write_text(FORGED)
    subprocess.run([python, "-c", PYC, str(forged), str(forged)], check=True)
    for path in [side, *side.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o777)
        os.lchown(path, NOBODY, NOBODY)


def run(python: str, tmp_path: Path) -> tuple:
    said: list[str] = []
    result = launch([python, "rank.py"], nproc=2, backend="plain", job_id=JOB_ID,
                    cache_dir=str(tmp_path / "cache"), log_dir=str(tmp_path / "logs"),
                    cwd=str(tmp_path), tracking="none", check=False, show="none",
                    write=said.append)
    return result, "".join(said)


def test_a_planted_rank_side_is_replaced_never_imported_nor_written_through(foreign_python, bare):
    tmp_path = bare
    victim, marker = tmp_path / "victim.txt", tmp_path / "sitecustomize-ran"
    victim.write_text("outside the cache\n")
    job_cache = tmp_path / "cache" / JOB_ID
    job_cache.mkdir(parents=True)
    job_cache.chmod(0o777)  # this user's, but anyone may add to it (a umask of 000)
    side = job_cache / "rank-side"
    plant_rank_side(foreign_python, side, victim, marker)

    result, said = run(foreign_python, tmp_path)
    assert result.ok, said
    assert f"its ranks import the rank side of tracking from {side}" in said
    for rank in ("0", "1"):
        log = (Path(result.job_dir) / f"rank_{rank}.log").read_text()
        assert f"rank side from {side}/platform_plugin/__init__.py" in log, log
        assert "PLANTED" not in log
    assert victim.read_text() == "outside the cache\n"  # never written through the link
    assert not marker.exists()  # the planted sitecustomize.py never ran
    assert not (side / "sitecustomize.py").exists()
    found = side.lstat()
    assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (os.geteuid(), 0o700)
    assert stat.S_IMODE(job_cache.stat().st_mode) & 0o022 == 0
    errors = (side / "platform_plugin" / "errors.py").lstat()
    assert stat.S_ISREG(errors.st_mode)
    assert (side / "platform_plugin" / "tracking" / "rank" / "tracker.py").read_text() != FORGED
    assert [p.name for p in job_cache.iterdir() if p.name.startswith(".rank-side")] == []


def test_a_job_cache_folder_of_another_user_is_refused_before_anything_is_copied(foreign_python,
                                                                                 bare):
    tmp_path = bare
    job_cache = tmp_path / "cache" / JOB_ID
    job_cache.mkdir(parents=True)
    job_cache.chmod(0o777)
    os.chown(job_cache, NOBODY, NOBODY)
    with pytest.raises(ConfigError) as refused:
        run(foreign_python, tmp_path)
    assert [p.code for p in refused.value.problems] == ["LAUNCH_RANK_SIDE_NOT_OWN"]
    assert "belongs to another user" in str(refused.value)
    assert list(job_cache.iterdir()) == []


def test_a_job_cache_folder_that_is_a_link_is_refused(foreign_python, bare):
    tmp_path = bare
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / JOB_ID).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ConfigError) as refused:
        run(foreign_python, tmp_path)
    assert [p.code for p in refused.value.problems] == ["LAUNCH_RANK_SIDE_NOT_OWN"]
    assert list(elsewhere.iterdir()) == []
