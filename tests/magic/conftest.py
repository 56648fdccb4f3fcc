"""One real IPython kernel per test module (jupyter_client), MLflow in a scratch store."""
from __future__ import annotations

import pytest
from jupyter_client.manager import start_new_kernel

from tests.helpers import clean_env
from tests.launcher.helpers import kill_job


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("kernel")
    env = clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{cwd / 'mlflow.db'}")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(cwd), env=env)
    kc.log_dir = cwd / "logs"
    kc.cwd = cwd
    try:
        yield km, kc
    finally:
        if kc.log_dir.exists():
            for job in kc.log_dir.iterdir():
                kill_job(str(job))
        kc.stop_channels()
        km.shutdown_kernel(now=True)
