"""`make demo` end to end: scripts/demo.sh runs the MindSpore example as a full run on 2 CPU
ranks with a local SQLite MLflow store, then prints the rank comparison and the MLflow link."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import REPO, VENV_BIN
from tests.examples.helpers import assert_data_parallel_run, example_env

pytestmark = pytest.mark.slow


@pytest.mark.compat  # make test-compat: `platform-run full` of the example on Python 3.9
def test_demo_runs_the_full_run_and_compares_ranks(tmp_path):
    env = {**example_env(tmp_path), "DEMO_DIR": str(tmp_path / "demo"), "DEMO_BIN": str(VENV_BIN),
           "RANK_START": "8"}  # a stray platform variable in the shell must not break the demo
    result = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh")], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]

    code = tmp_path / "demo" / "CODE"
    assert_data_parallel_run(code, "outputs/mindspore_digits", 2, "digits_mlp.ckpt")
    (run_notebook,) = (code / "runs").glob("*-full-mindspore_digits_data_parallel.ipynb")
    assert f"output notebook: {run_notebook}" in out
    # the result stands at the very end, after the run's and the comparison's lines
    tail = result.stdout.rstrip().splitlines()[-6:]
    assert tail[0] == "== make demo: done" and tail[1].endswith(str(run_notebook)), tail
    # The comparison comes from the MLflow store the demo created outside CODE/.
    assert (tmp_path / "demo" / "mlflow.db").is_file()
    assert "rank-00" in out and "rank-01" in out
    assert "http://127.0.0.1:5000/#/metric?runs=" in out
    (job_json,) = (code / "platform_logs").glob("*/job.json")
    assert json.loads(job_json.read_text())["plan"]["backend"] == "ms-cluster"
