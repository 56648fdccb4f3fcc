"""launcher/planning/rank_path.py: which ranks get the copy of the rank side on their PYTHONPATH.
A second interpreter stands in for an image's Python: the pyenv interpreter behind this venv,
which imports platform_plugin only through PYTHONPATH."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from platform_plugin import settings as settings_mod
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.planning import rank_path
from platform_plugin.launcher.planning.plan import Host
from tests.helpers import REPO
from tests.launcher.helpers import planned

NO_TABLE = settings_mod.resolve("debug", environ={}, cwd="/nonexistent-cwd-for-tests")
OTHER_PYTHON = os.path.realpath(sys.executable)  # not this venv's: no site-packages of it


def plan_for(command, tmp_path, **base_env):
    (tmp_path / "train.py").write_text("pass\n")
    options = LaunchOptions(backend="plain", nproc=2, job_id="job-1", cwd=str(tmp_path),
                            log_dir=str(tmp_path / "logs"), cache_dir=str(tmp_path / "cache"))
    env = {"PATH": os.environ["PATH"], **base_env}
    return planned(command, NO_TABLE, options, Host(base_env=env))


def test_a_rank_on_the_launchers_interpreter_is_left_as_it_is_without_asking(tmp_path, monkeypatch):
    def no_probe(*args, **kwargs):
        raise AssertionError("nothing may be spawned for the launcher's own interpreter")

    monkeypatch.setattr(subprocess, "run", no_probe)
    plan = plan_for(["python", "train.py"], tmp_path)
    assert rank_path.with_rank_side(plan) is plan
    assert rank_path.with_rank_side(plan_for(["bash", "-c", "true"], tmp_path)).ranks == plan_for(
        ["bash", "-c", "true"], tmp_path).ranks  # no Python interpreter: nothing to ask


def test_another_interpreter_that_imports_the_package_keeps_its_own(tmp_path):
    plan = plan_for([OTHER_PYTHON, "train.py"], tmp_path, PYTHONPATH=str(REPO))
    assert rank_path.with_rank_side(plan) is plan
    assert not (tmp_path / "cache").exists()


def test_another_interpreter_that_cannot_import_it_gets_the_copy_last_on_its_path(tmp_path):
    plan = plan_for([OTHER_PYTHON, "-u", "train.py"], tmp_path, PYTHONPATH="/opt/theirs")
    given = rank_path.with_rank_side(plan)
    folder = str(tmp_path / "cache" / "job-1" / "rank-side")
    assert [r.env["PYTHONPATH"] for r in given.ranks] == [f"/opt/theirs{os.pathsep}{folder}"] * 2
    copied = sorted(str(p.relative_to(folder + "/platform_plugin"))
                    for p in (tmp_path / "cache" / "job-1" / "rank-side").rglob("*.py"))
    assert copied == sorted(rank_path.rank_side_files())
    assert "tracking/integrations/mindspore.py" in copied
    # the copy alone serves a rank: its tracker spools
    spool = tmp_path / "spool"
    code = ("from platform_plugin.tracking import get_tracker; t = get_tracker(); "
            "t.log_metric('loss', 0.5); t.close(); import platform_plugin; print(platform_plugin.__file__)")
    out = subprocess.run([OTHER_PYTHON, "-S", "-c", code], capture_output=True, text=True,
                         env={**given.ranks[0].env, "PLATFORM_TRACKING_SPOOL_DIR": str(spool),
                              "PLATFORM_TRACKING": "mlflow"}, cwd=tmp_path, check=True)
    assert out.stdout.strip() == f"{folder}/platform_plugin/__init__.py"
    assert '"loss",0.5' in (spool / "rank_0.jsonl").read_text()


@pytest.mark.parametrize("argv, first", [
    (("python", "train.py"), "/code"),
    (("python", "-u", "-X", "dev", "sub/train.py"), "/code/sub"),
    (("python", "/abs/train.py"), "/abs"),
    (("python", "-m", "pkg.train"), "/code"),
    (("python", "-c", "pass"), "/code"),
])
def test_the_probe_looks_where_the_rank_will(argv, first):
    assert rank_path.first_path(argv, "/code") == first


def test_the_probe_keeps_the_flags_that_change_the_path():
    assert rank_path.interpreter_flags(("python", "-u", "-S", "-I", "train.py", "-s")) == ["-S", "-I"]


def test_the_copy_holds_every_module_its_modules_import_at_their_top():
    """What a copied module imports when it is imported must be copied too (imports inside
    functions are the routes a rank under the launcher does not take, bar get_tracker's
    sink choice, which RANK_SIDE lists)."""
    import ast
    files = set(rank_path.rank_side_files())
    missing = []
    for relative in sorted(files):
        tree = ast.parse((REPO / "platform_plugin" / relative).read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("platform_plugin."):
                path = node.module.split(".", 1)[1].replace(".", "/")
                if f"{path}.py" not in files and f"{path}/__init__.py" not in files:
                    missing.append(f"{relative} imports {node.module}")
    assert missing == []
