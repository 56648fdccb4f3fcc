"""Ranks on Python 3.7 (the Ascend TensorFlow 1.15 and MindSpore 1.x images): the rank side is
3.7 code, and the launcher, on its own 3.9+ interpreter, gives it to a 3.7 rank that has no
install of the plugin, without shadowing one that has (docs/compat.md).

`make test-compat37` creates the 3.7 venv (.venv37) and runs these; elsewhere they use the venv
named by PYTHON37_VENV (default .venv37) and skip, saying so, when there is none."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from platform_plugin.launcher import launch
from platform_plugin.launcher.planning.rank_path import rank_side_files, write_rank_side
from tests.compat.test_pythons import interpreter
from tests import helpers
from tests.helpers import REPO, clean_env, copy_tracking_asset, wait_for

pytestmark = pytest.mark.py37


@pytest.fixture(scope="module")
def python37() -> str:
    return helpers.python37()


CHECK = """\
import json, os, sys
from platform_plugin.tracking import get_tracker
from platform_plugin.tracking.rank.spool import read_complete
tracker = get_tracker()
tracker.log_metric("loss", 0.5)
tracker.close()
chunk = read_complete(tracker.spool_path, 0)
print(json.dumps([sys.version_info[:2], [record[:4] for record, end in chunk.records]]))
"""


def test_every_rank_side_module_is_python_37_code(tmp_path):
    """Compiled by a bare 3.7 (the grammar), then the copy alone runs a tracker (the stdlib
    names it uses) - and docs/compat.md names every one of these modules."""
    python = interpreter("3.7")
    files = rank_side_files()
    compile_all = ("import sys\nfor path in sys.argv[1:]:\n"
                   "    compile(open(path, encoding='utf-8').read(), path, 'exec')")
    done = subprocess.run([python, "-S", "-c", compile_all,
                           *[str(REPO / "platform_plugin" / f) for f in files]],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    folder = write_rank_side(str(tmp_path / "rank-side"))
    env = clean_env(PYTHONPATH=folder, PLATFORM_TRACKING_SPOOL_DIR=str(tmp_path / "spool"),
                    PLATFORM_TRACKING="mlflow", RANK_ID="0", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([python, "-S", "-c", CHECK], env=env, capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[3, 7], [["m", "loss", 0.5, 0]]]
    documented = (REPO / "docs" / "compat.md").read_text(encoding="utf-8")
    assert [f for f in files if f"`{f}`" not in documented] == []


TRAIN37 = """\
import os, sys
from platform_plugin.tracking import get_tracker
t = get_tracker()
rank = int(os.environ["RANK_ID"])
t.log_param("python", "%d.%d" % sys.version_info[:2])
t.set_tag("interpreter", sys.executable)
for step in range(10):
    t.log_metric("loss", 1.0 / (step + 1) + rank)
t.log_metrics({"acc": 0.5 + rank, "lr": 0.1})
import platform_plugin
print("rank side from", platform_plugin.__file__, flush=True)
"""


@pytest.mark.slow
def test_a_37_rank_tracks_through_platform_run_launch_without_an_install(python37, tmp_path):
    """`platform-run launch` on this interpreter, the ranks on 3.7 whose environment has no
    platform_plugin (no PYTHONPATH to this checkout either): every record reaches MLflow once."""
    (tmp_path / "train37.py").write_text(TRAIN37)
    env = clean_env(PLATFORM_LOG_DIR=str(tmp_path / "logs"), PLATFORM_TRACKING_DRAIN_TIMEOUT="120")
    env.pop("PYTHONPATH", None)
    cli = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from platform_plugin.cli import main; "
           "sys.exit(main())")
    done = subprocess.run([sys.executable, "-c", cli, "launch", "--nproc", "2", "--backend",
                           "plain", "--no-system-metrics", "--", python37, "train37.py"],
                          cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tracking: mlflow: 28 records delivered" in done.stdout
    job_id = done.stdout.split("[launcher] job ", 1)[1].split(":", 1)[0]
    folder = f"{Path.home()}/.cache/platform_plugin/{job_id}/rank-side"
    assert f"[launcher] {python37} cannot import platform_plugin: its ranks import the rank " \
           f"side of tracking from {folder} (appended to their PYTHONPATH)" in done.stdout
    assert f"rank side from {Path.home()}/.cache/platform_plugin/{job_id}/rank-side/" \
           "platform_plugin/__init__.py" in done.stdout

    from mlflow.tracking import MlflowClient
    from tests.tracking.helpers import child_runs
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    [parent] = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                  filter_string=f"attributes.run_name = '{job_id}'")
    wait_for(lambda: client.get_run(parent.info.run_id).info.status == "FINISHED",
             what="the parent run ended")
    children = child_runs(client, parent.info.run_id)
    assert [r.info.run_name for r in children] == ["rank-00", "rank-01"]
    for rank, run in enumerate(children):
        assert run.data.params == {"python": "3.7"}
        assert run.data.tags["interpreter"] == python37 and run.data.tags["rank_id"] == str(rank)
        history = client.get_metric_history(run.info.run_id, "loss")
        assert sorted(m.step for m in history) == list(range(10))
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(
            [1.0 / (step + 1) + rank for step in range(10)])
        for name, value in (("acc", 0.5 + rank), ("lr", 0.1)):
            assert [m.value for m in client.get_metric_history(run.info.run_id, name)] == [value]


WHERE = """\
import json, os, platform_plugin
with open("where_%s.json" % os.environ["RANK_ID"], "w") as f:
    json.dump([platform_plugin.__file__, os.environ.get("PYTHONPATH", "")], f)
"""


@pytest.mark.slow
def test_a_37_rank_with_its_own_install_keeps_it(python37, tmp_path, clean_environ):
    """A 3.7 environment with the rank side in its site-packages (an install): the launcher
    asks, finds it, and adds nothing that would come before it."""
    env37 = tmp_path / "env37"
    subprocess.run([python37, "-m", "venv", "--without-pip", str(env37)], check=True)
    [site] = env37.glob("lib/python3.7/site-packages")
    for relative in rank_side_files():  # installed beside what site-packages holds
        target = site / "platform_plugin" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "platform_plugin" / relative, target)
    (tmp_path / "where.py").write_text(WHERE)
    clean_environ.delenv("PYTHONPATH", raising=False)
    result = launch([str(env37 / "bin" / "python"), "where.py"], nproc=2, backend="plain",
                    cwd=str(tmp_path), tracking="none", log_dir=str(tmp_path / "logs"),
                    write=lambda text: None)
    assert result.ok
    for rank in (0, 1):
        module, path = json.loads((tmp_path / f"where_{rank}.json").read_text())
        assert (module, path) == (str(site / "platform_plugin" / "__init__.py"), "")


def plugin_command(folder: Path) -> str:
    """An executable `platform-run` of this checkout that leaves no PYTHONPATH to it behind
    (a checkout on PYTHONPATH would be an install for every process started from it)."""
    script = folder / "platform-run"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"import sys; sys.path.insert(0, "
                      f"'{REPO}'); from platform_plugin.cli import main; sys.exit(main())\" \"$@\"\n")
    script.chmod(0o755)
    return str(script)


def kernel_of(python37: str, folder: Path) -> dict[str, str]:
    """A Jupyter data folder whose kernel `py37` runs `python37`: JUPYTER_PATH for it."""
    spec = folder / "kernels" / "py37"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [python37, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3.7 (the image's)", "language": "python"}))
    return {"JUPYTER_PATH": str(folder)}


def test_doctor_says_which_route_a_37_kernel_takes(python37, tmp_path):
    run = plugin_command(tmp_path)
    env = clean_env(**kernel_of(python37, tmp_path / "jupyter"))
    env.pop("PYTHONPATH", None)
    done = subprocess.run([run, "doctor", "--json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    rows = [row for row in json.loads(done.stdout) if row["check"] == "Python"]
    [row] = [row for row in rows if "kernel py37" in row["detail"]]
    assert row["status"] == "WARN" and "kernel py37 is Python 3.7." in row["detail"]
    assert f"launch --nproc N -- {{sys.executable}} train.py" in row["fix"]
    assert "debug|full NOTEBOOK -k py37" in row["fix"]


@pytest.mark.slow
def test_platform_run_debug_of_a_notebook_on_a_37_kernel(python37, tmp_path):
    """The route for a 3.7 kernel: `platform-run debug -k py37` from the plugin's environment;
    the notebook's cell starts the launcher from there and the ranks on the kernel's Python."""
    has_kernel = subprocess.run([python37, "-c", "import ipykernel"], capture_output=True)
    if has_kernel.returncode != 0:
        pytest.skip(f"no ipykernel in {python37}: `make test-compat37` installs it")
    import nbformat
    run = plugin_command(tmp_path)
    (tmp_path / "train37.py").write_text(TRAIN37)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import sys\nprint('kernel on %d.%d' % sys.version_info[:2])"),
                nbformat.v4.new_code_cell(f"!{run} launch --nproc 2 --backend plain "
                                          "--no-system-metrics -- "
                                          "{sys.executable} train37.py; echo launch-exit=$?")]
    nbformat.write(nb, tmp_path / "nb.ipynb")
    env = clean_env(PLATFORM_LOG_DIR=str(tmp_path / "logs"), **kernel_of(python37, tmp_path / "jupyter"))
    env.pop("PYTHONPATH", None)
    done = subprocess.run([run, "debug", "nb.ipynb", "-k", "py37"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kernel on 3.7" in done.stdout and "launch-exit=0" in done.stdout
    assert "tracking: mlflow: 28 records delivered" in done.stdout
    assert done.stdout.count("/rank-side/platform_plugin/__init__.py") == 2


@pytest.mark.slow
def test_a_mindspore_20_job_on_37_tracks_with_the_callback(python37, tmp_path, clean_environ):
    """MindSpore 2.0.0 (the last cp37 release) on 3.7 ranks, the MetricsCallback from the
    launcher's copy of the rank side. The plain backend: MindSpore 2.0's dynamic cluster
    refuses PyNative mode ("not supported in dynamic networking"), which this script uses."""
    has_mindspore = subprocess.run([python37, "-c", "import mindspore"], capture_output=True)
    if has_mindspore.returncode != 0:
        pytest.skip(f"no MindSpore in {python37}: `make test-compat37` installs 2.0.0")
    from tests.tracking.helpers import child_runs, client
    copy_tracking_asset("ms_train.py", tmp_path)
    clean_environ.delenv("PYTHONPATH", raising=False)
    clean_environ.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "120")
    result = launch([python37, "ms_train.py"], nproc=2, backend="plain", cwd=str(tmp_path),
                    log_dir=str(tmp_path / "logs"), no_system_metrics=True,
                    write=lambda text: None)
    report = result.tracking
    per_rank = 4 + 2 * 8 + 2 * 4  # params, a loss per step, 4 metrics per epoch
    assert result.ok and (report.delivered, report.pending) == (2 * per_rank, 0)
    assert report.wait_ended()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    children = child_runs(c, report.parent_run_id)
    assert [r.info.run_name for r in children] == ["rank-00", "rank-01"]
    for run in children:
        assert run.data.params == {"epochs": "2", "steps_per_epoch": "8", "batch_size": "16",
                                   "optimizer": "SGD"}
        assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "loss")) == list(range(1, 17))
