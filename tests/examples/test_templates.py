"""templates/: the profile, the .env example, the notebook skeleton and run.sh, each used the
way a user would (the skeleton and run.sh through the real runner and launcher)."""
from __future__ import annotations

import json
import shutil
import subprocess

import papermill
import pytest
from dotenv import dotenv_values

from tests.examples.helpers import NOTEBOOKS, TEMPLATES, example_env, run_cli
from platform_plugin.notebook.params import load_profile
from platform_plugin.settings import PLATFORM_VARS

# Stands in for the user's train.py: records what each rank was given.
RECORDING_TRAIN_PY = """\
import json, os, sys
rank = os.environ["RANK_ID"]
os.makedirs("ranks", exist_ok=True)
with open(f"ranks/{rank}.json", "w") as fh:
    json.dump({"argv": sys.argv[1:], "RANK_SIZE": os.environ["RANK_SIZE"],
               "mode": os.environ.get("PLATFORM_RUN_MODE")}, fh)
sys.exit(3 if os.environ.get("FAIL_RANK") == rank else 0)
"""


def recorded(project):
    return {int(p.stem): json.loads(p.read_text()) for p in (project / "ranks").glob("*.json")}


@pytest.mark.parametrize("profile, notebooks", [
    (TEMPLATES / "platform.toml", [TEMPLATES / "notebook.ipynb"]),
    (NOTEBOOKS / "platform.toml", [NOTEBOOKS / "mindspore_digits_data_parallel.ipynb",
                                   NOTEBOOKS / "torch_ddp_digits.ipynb"]),
])
def test_profiles_only_set_parameters_their_notebooks_declare(profile, notebooks, tmp_path):
    """papermill assigns unknown names silently (a typo would change nothing): every profile
    parameter must exist in the parameters cell of the notebooks it is meant for."""
    for mode in ("debug", "full"):
        parameters, path = load_profile(mode, str(profile), tmp_path)
        assert path == profile and {"epochs", "sample_size"} <= set(parameters)
        for notebook in notebooks:
            declared = set(papermill.inspect_notebook(str(notebook)))
            assert set(parameters) <= declared, (mode, notebook.name, set(parameters) - declared)
    debug, _ = load_profile("debug", str(profile), tmp_path)
    full, _ = load_profile("full", str(profile), tmp_path)
    assert debug["sample_size"] > 0 and full["sample_size"] == 0  # debug: a sample; full: all
    assert debug["epochs"] < full["epochs"]


@pytest.mark.parametrize("notebook", [TEMPLATES / "notebook.ipynb",
                                      NOTEBOOKS / "mindspore_digits_data_parallel.ipynb",
                                      NOTEBOOKS / "torch_ddp_digits.ipynb"])
def test_notebook_text_describes_the_cell_as_it_is(notebook):
    """What the shipped notebooks tell a user about the %dist_run cell: the live board (a
    `[rank N]` line per line only with --show all), and the ranks compared in the cell with
    %dist_compare, not a terminal command behind `!`."""
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] != "markdown":
            continue
        assert "[rank N]" not in text or "--show all" in text, text
        assert "!platform-run compare" not in text, text


def test_env_example_sets_nothing_and_names_what_the_platform_owns():
    assert dotenv_values(TEMPLATES / ".env.example") == {}  # a template, every line commented
    text = (TEMPLATES / ".env.example").read_text()
    for name in PLATFORM_VARS:
        assert name in text, f"{name} is platform-owned: .env.example must say so"
    assert "never overrides" in text.lower()


def test_env_example_says_the_defaults_the_launcher_uses(tmp_path, monkeypatch):
    """Its comments name the experiment and the store a job really gets (conventions.py)."""
    from platform_plugin.tracking.shared import conventions
    text = (TEMPLATES / ".env.example").read_text()
    ranks = tmp_path / "proj" / "CODE" / "exp1"
    environ = {}
    assert conventions.default_store(ranks, environ)[0] == f"sqlite:///{tmp_path / 'proj' / 'mlflow.db'}"
    assert "BESIDE the CODE/ folder" in text and "in the project folder" not in text
    assert conventions.experiment_name(environ, ranks) == "proj"
    assert conventions.experiment_name({"PLATFORM_NOTEBOOK": "/x/digits.ipynb"}, ranks) == "digits"
    assert "the notebook's name" in text and "the project folder's name" in text
    assert "script's name" not in text


@pytest.mark.slow
def test_skeleton_notebook_passes_profile_parameters_to_every_rank(tmp_path):
    project = tmp_path / "CODE"
    project.mkdir()
    shutil.copy2(TEMPLATES / "notebook.ipynb", project)
    shutil.copy2(TEMPLATES / "platform.toml", project)
    (project / "train.py").write_text(RECORDING_TRAIN_PY)

    result = run_cli(["debug", "notebook.ipynb", "-p", "epochs", "4"], project, example_env(tmp_path))

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = recorded(project)
    assert sorted(ranks) == [0, 1]
    debug, _ = load_profile("debug", None, project)
    for rank in ranks.values():
        assert rank["RANK_SIZE"] == "2" and rank["mode"] == "debug"
        assert rank["argv"] == ["--data-path", debug["data_path"], "--epochs", "4",  # -p wins
                                "--sample-size", str(debug["sample_size"]),
                                "--batch-size", str(debug["batch_size"]), "--lr", str(debug["lr"])]


@pytest.mark.slow
@pytest.mark.parametrize("fail_rank, exit_code", [(None, 0), ("1", 1)])
def test_run_sh_starts_one_rank_each_and_fails_when_a_rank_fails(fail_rank, exit_code, tmp_path):
    """The platform's shell loop exited 0 whatever the ranks did; run.sh must not."""
    project = tmp_path / "CODE"
    project.mkdir()
    shutil.copy2(TEMPLATES / "run.sh", project)
    (project / "train.py").write_text(RECORDING_TRAIN_PY)
    env = {**example_env(tmp_path), "NPROC": "2", "PLATFORM_TRACKING": "none"}
    if fail_rank:
        env["FAIL_RANK"] = fail_rank

    result = subprocess.run(["bash", "run.sh", "--epochs", "1"], cwd=project, env=env,
                            capture_output=True, text=True, timeout=300)

    assert result.returncode == exit_code, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = recorded(project)
    # the failing rank writes before it exits; the job may stop the other rank before it does
    must_have = {0, 1} if fail_rank is None else {int(fail_rank)}
    assert must_have <= set(ranks)
    assert all(r["argv"] == ["--epochs", "1"] and r["RANK_SIZE"] == "2" for r in ranks.values())
    logs = list((project / "platform_logs").glob("*/rank_1.log"))
    assert len(logs) == 1
