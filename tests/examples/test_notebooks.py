"""The example notebooks, executed for real: a Jupyter kernel driven by papermill, `%dist_run`
starting 2 CPU ranks (MindSpore's dynamic cluster / torch gloo), real training on digits."""
from __future__ import annotations

import nbformat
import papermill
import pytest

from tests.helpers import wait_for
from tests.examples.helpers import (MINDSPORE_NOTEBOOK, TORCH_NOTEBOOK, apply_env,
    assert_data_parallel_run, example_env, job_dirs, logged_summaries, make_project, run_cli)

pytestmark = pytest.mark.slow

CASES = {
    "mindspore": (MINDSPORE_NOTEBOOK, "outputs/mindspore_digits", "digits_mlp.ckpt"),
    "torch": (TORCH_NOTEBOOK, "outputs/torch_digits", "digits_mlp.pt"),
}


@pytest.mark.parametrize("framework", sorted(CASES))
def test_notebook_trains_two_identical_ranks_under_papermill(framework, tmp_path, monkeypatch):
    notebook, out_dir, checkpoint = CASES[framework]
    project = make_project(tmp_path)
    apply_env(monkeypatch, example_env(tmp_path))
    output = tmp_path / f"out-{notebook}"

    papermill.execute_notebook(str(project / notebook), str(output), cwd=str(project),
                               parameters={"epochs": 3, "cpu_ranks": 2}, kernel_name="python3",
                               progress_bar=False)

    summaries = assert_data_parallel_run(project, out_dir, 2, checkpoint)
    # The ranks' own log lines (written by the launcher) tell the same story as the files.
    (job_dir,) = job_dirs(project)
    from_logs = logged_summaries(job_dir)
    assert {r: s["params_sha256"] for r, s in from_logs.items()} == \
        {s["rank"]: s["params_sha256"] for s in summaries}
    # The notebook's own check cell ran and passed (it fails the run when ranks diverge).
    executed = nbformat.read(output, as_version=4)
    # streams, and the rank board's final text (display_data) that holds each rank's tail
    texts = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                    for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "2 rank(s) identical" in texts
    assert "-- rank 1 (" in texts  # rank 1's own last lines, under the board


def test_failing_rank_fails_the_debug_run_with_its_reason(tmp_path):
    """Too few samples for one batch per rank: both ranks exit 2 with a message; the cell,
    the notebook and `platform-run debug` fail (exit 1) instead of reporting success."""
    project = make_project(tmp_path)
    result = run_cli(["debug", TORCH_NOTEBOOK, "-p", "sample_size", "20", "-p", "epochs", "1"],
                     project, example_env(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    both = result.stdout + result.stderr
    assert "raise --sample-size or lower --batch-size" in both
    assert not (project / "outputs" / "torch_digits" / "rank_0.json").exists()
    # the job's parent run names the notebook as its source and holds the run's parameters
    from mlflow.tracking import MlflowClient
    store = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = wait_for(lambda: store.get_experiment_by_name("torch_ddp_digits"), timeout=120,
                          what="the notebook's experiment")
    parent = wait_for(lambda: [r for r in store.search_runs([experiment.experiment_id])
                               if "mlflow.parentRunId" not in r.data.tags],
                      timeout=120, what="the job's parent run")[0]
    assert parent.data.tags["mlflow.source.type"] == "NOTEBOOK"
    assert parent.data.tags["mlflow.source.name"] == str(project / TORCH_NOTEBOOK)
    params = wait_for(lambda: store.get_run(parent.info.run_id).data.params.get("sample_size") and
                      store.get_run(parent.info.run_id).data.params, timeout=120,
                      what="the parent's params (logged right after the run is created)")
    assert params["sample_size"] == "20" and params["epochs"] == "1"
