"""A tracked %dist_run starts its store's MLflow UI while the job runs (2 s in, nice 10, once
per kernel), so %dist_compare after it has the page at once; PLATFORM_MLFLOW_UI_EARLY=0 turns
that off. A real kernel, real ranks, a real `mlflow server` (the page itself, in Chromium:
tests/jupyterlab/test_compare_lab.py)."""
from __future__ import annotations

import pytest

from tests.helpers import mlflow_servers
from tests.launcher.helpers import ASSETS
from tests.magic.helpers import run_cell

pytestmark = pytest.mark.slow
RANK = ASSETS / "board_rank.py"


def ui_servers(store_dir) -> set[tuple[int, int]]:
    """(process group, niceness) of the `mlflow server` processes on the kernel's store: one
    group per UI."""
    return {(server.group, server.nice) for server in mlflow_servers(store_dir)}


def test_a_tracked_job_starts_the_ui_early_unless_told_not_to(kernel):
    km, kc = kernel
    job = f"%dist_run --nproc 1 --backend plain --log-dir {kc.log_dir} python {RANK} 25 0.2"
    run_cell(kc, "%load_ext platform_plugin")
    run_cell(kc, "import os; os.environ['PLATFORM_MLFLOW_UI_EARLY'] = '0'")
    assert run_cell(kc, job).ok
    assert ui_servers(kc.cwd) == set()  # turned off: nothing started
    run_cell(kc, "del os.environ['PLATFORM_MLFLOW_UI_EARLY']")
    assert run_cell(kc, job).ok  # 5 s: the UI is spawned 2 s in, while the job runs
    [(group, nice)] = ui_servers(kc.cwd)  # one UI ...
    assert nice == 10  # ... at low priority
    assert run_cell(kc, job).ok
    assert ui_servers(kc.cwd) == {(group, 10)}  # once per kernel



def test_the_early_start_leaves_a_store_not_made_yet_to_the_jobs_writer(tmp_path):
    """The UI's server would create a fresh sqlite store itself, holding the store's lock while
    it starts (niced: seconds), and the job's writer would wait for it: the early start waits
    for the store to be made, and a job that ends first made no UI (and no store)."""
    import threading
    import time

    from platform_plugin.comparison import jupyter_ui
    store, ended = f"sqlite:///{tmp_path / 'mlflow.db'}", threading.Event()
    jupyter_ui.start_early(store, ended)
    [early] = [t for t in threading.enumerate() if t.name == "platform-mlflow-ui-early"]
    time.sleep(jupyter_ui.EARLY_AFTER_S + 2)
    assert early.is_alive() and mlflow_servers(tmp_path) == []  # waiting for the writer
    ended.set()  # the job ended without making its store
    early.join(30)
    assert not early.is_alive() and not jupyter_ui.running(store)
    assert not (tmp_path / "mlflow.db").exists() and mlflow_servers(tmp_path) == []
