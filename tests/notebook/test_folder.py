"""The notebook's folder is a notebook run's working folder by default, as JupyterLab starts a
notebook's kernel there: `platform-run debug notebooks/x.ipynb` from the repository's root finds
the notebook's platform.toml, .env and files beside it; `--dry-run` says which folder and why;
`--cwd` overrides it. Real subprocesses (the dry runs start no kernel; the last test a real one)."""
from __future__ import annotations

import json

import pytest

from tests.helpers import REPO
from tests.notebook.helpers import make_notebook, platform_run, read_output, stream_text

TRACKED = ("%load_ext platform_plugin\n"
           "%dist_run --nproc 1 --backend plain python -c \"from platform_plugin import tracking; "
           "tracking.get_tracker().log_metric('loss', 0.5, step=0)\"")
PROBE = ("import json, os\nprint('PROBE=' + json.dumps({'cwd': os.getcwd(), 'epochs': epochs, "
         "'data': open('data.txt').read(), 'env': os.environ.get('DIGITS_SEED')}))")


def _project(root):
    folder = root / "notebooks"
    make_notebook(folder / "nb.ipynb", [PROBE, TRACKED], parameters="epochs = 1")
    (folder / "platform.toml").write_text("[debug.parameters]\nepochs = 4\n")
    (folder / ".env").write_text("DIGITS_SEED=7\n")
    (folder / "data.txt").write_text("beside the notebook")
    return folder


def test_dry_run_of_the_repositorys_notebook_from_its_root_uses_the_notebooks_folder():
    done = platform_run("debug", "notebooks/torch_ddp_digits.ipynb", "--dry-run", cwd=REPO,
                        timeout=120)
    assert done.returncode == 0, done.stderr
    folder = REPO / "notebooks"
    assert f"cwd        {folder}  (the notebook's folder; --cwd DIR to change)" in done.stdout
    assert f"profile    {folder / 'platform.toml'}" in done.stdout
    assert "epochs = 2  [profile]" in done.stdout  # notebooks/platform.toml's [debug.parameters]


def test_cwd_overrides_the_notebooks_folder(tmp_path):
    _project(tmp_path)
    done = platform_run("debug", "notebooks/nb.ipynb", "--cwd", ".", "--dry-run", cwd=tmp_path,
                        timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"cwd        {tmp_path}  (--cwd)" in done.stdout
    assert "profile    (none)" in done.stdout and "DIGITS_SEED" not in done.stdout


@pytest.mark.slow
def test_a_run_from_the_parent_folder_works_in_the_notebooks_folder(tmp_path):
    folder = _project(tmp_path)
    done = platform_run("debug", "notebooks/nb.ipynb", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [output] = sorted((folder / "runs").glob("*.ipynb"))  # runs/ beside the notebook
    line = next(l for l in stream_text(read_output(output)).splitlines() if l.startswith("PROBE="))
    assert json.loads(line[len("PROBE="):]) == {"cwd": str(folder), "epochs": 4,
                                                "data": "beside the notebook", "env": "7"}
    assert not (tmp_path / "runs").exists()
    # the kernel's line reaches the notebook and this terminal: each is told its own way
    hint = next(l for l in done.stdout.splitlines() if "compare ranks:" in l)
    job = next((folder / "platform_logs").iterdir())
    assert f"%dist_compare {job.name} in the notebook" in hint, hint
    assert f"`platform-run compare {job} --url` in a terminal" in hint, hint
