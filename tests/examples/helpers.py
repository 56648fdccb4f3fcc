"""Helpers for the example/template/demo tests: a scratch CODE/ project, a clean environment
for the kernel and the ranks, and the checks every data-parallel run must pass."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.helpers import REPO, VENV_BIN, clean_env

NOTEBOOKS = REPO / "notebooks"
TEMPLATES = REPO / "templates"
MINDSPORE_NOTEBOOK = "mindspore_digits_data_parallel.ipynb"
TORCH_NOTEBOOK = "torch_ddp_digits.ipynb"
SUMMARY_PREFIX = "rank_summary "  # notebooks/digits_common.py prints this per rank


def make_project(root: Path, files: list[str] | None = None) -> Path:
    """A copy of the examples in `<root>/CODE`, the platform's project folder layout. The tests
    write checkpoints, logs and output notebooks there, never into the repository."""
    code = root / "CODE"
    code.mkdir(parents=True)
    for path in NOTEBOOKS.iterdir():
        if path.is_file() and (files is None or path.name in files):
            shutil.copy2(path, code / path.name)
    return code


def example_env(store_dir: Path) -> dict[str, str]:
    """A clean environment (no platform variables, the venv first on PATH), MLflow in store_dir."""
    return clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{store_dir / 'mlflow.db'}")


def apply_env(monkeypatch, env: dict[str, str]) -> None:
    """Make os.environ exactly `env` for an in-process papermill run (its kernel inherits it)."""
    for name in list(os.environ):
        if name not in env:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def run_cli(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 420
            ) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "platform-run"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def read_summaries(out_dir: Path) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in out_dir.glob("rank_*.json")),
                  key=lambda s: s["rank"])


def job_dirs(project: Path) -> list[Path]:
    return sorted(p for p in (project / "platform_logs").iterdir() if (p / "job.json").is_file())


def logged_summaries(job_dir: Path) -> dict[int, dict]:
    """The summary each rank printed, read back from the launcher's per-rank log files."""
    found = {}
    for log in job_dir.glob("rank_*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(SUMMARY_PREFIX):
                summary = json.loads(line[len(SUMMARY_PREFIX):])
                found[summary["rank"]] = summary
    return found


def assert_data_parallel_run(project: Path, out_dir: str, world_size: int,
                             checkpoint_glob: str) -> list[dict]:
    """Every rank reported; the loss fell on every rank; the ranks ended bit-identical; the
    checkpoint was written once (anywhere in the project) and restored the trained weights
    on every rank."""
    summaries = read_summaries(project / out_dir)
    assert [s["rank"] for s in summaries] == list(range(world_size))
    assert all(s["world_size"] == world_size for s in summaries)
    for s in summaries:
        assert s["epoch_loss"][-1] < s["epoch_loss"][0], s
    digests = {s["params_sha256"] for s in summaries}
    assert len(digests) == 1, f"ranks diverged: {digests}"
    assert all(s["restored_params_sha256"] == s["params_sha256"] for s in summaries)
    checkpoints = list(project.rglob(checkpoint_glob))
    assert len(checkpoints) == 1, checkpoints
    return summaries
