"""The rank side (tracker, spool, identity) needs nothing but the standard library: a training
script logs in an interpreter that cannot import MLflow (nor anything outside the stdlib:
`python -S` drops site-packages), and `platform-run sync` delivers it from an environment
that has MLflow. `make test-compat` runs this on Python 3.9."""
from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, VENV_BIN, clean_env
from tests.tracking.helpers import client, spool_records

SCRIPT = """\
import sys
from platform_plugin.tracking import get_tracker
tracker = get_tracker()
tracker.log_param("lr", 0.1)
for step in range(3):
    tracker.log_metric("loss", 1.0 / (step + 1), step=step)
assert "mlflow" not in sys.modules and "numpy" not in sys.modules
print("logged on", sys.version_info[:2])
"""


def run_without_site_packages(tmp_path, **env):
    (tmp_path / "train.py").write_text(SCRIPT)
    return subprocess.run([sys.executable, "-S", "train.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=clean_env(PYTHONPATH=str(REPO), **env))


def test_a_rank_under_the_launcher_spools_without_mlflow(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    result = run_without_site_packages(tmp_path, PLATFORM_TRACKING_SPOOL_DIR=str(spool),
                                       RANK_ID="1", MLFLOW_TRACKING_URI="sqlite:///x.db")
    assert result.returncode == 0, result.stderr
    records = spool_records(spool, "1")
    assert ["p", "lr", "0.1"] in records
    assert [r[2] for r in records if r[0] == "m"] == [1.0, 0.5, 1.0 / 3]


def test_a_script_without_launcher_keeps_its_records_for_sync(tmp_path):
    db = tmp_path / "mlflow.db"
    logs = tmp_path / "platform_logs"
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{db}", "PLATFORM_LOG_DIR": str(logs)}
    result = run_without_site_packages(tmp_path, **env)
    assert result.returncode == 0, result.stderr
    assert "mlflow is not importable in this interpreter" in result.stderr
    (job_dir,) = [p for p in logs.iterdir() if p.is_dir()]
    assert f"platform-run sync {job_dir}" in result.stderr

    sync = subprocess.run([str(VENV_BIN / "platform-run"), "sync", str(job_dir), "--end",
                           "FINISHED"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=clean_env(**env))
    assert sync.returncode == 0, sync.stdout + sync.stderr
    c = client(f"sqlite:///{db}")
    (run,) = c.search_runs([e.experiment_id for e in c.search_experiments()])
    assert run.data.params == {"lr": "0.1"}
    assert [m.value for m in c.get_metric_history(run.info.run_id, "loss")] == [1.0, 0.5, 1.0 / 3]
