"""The stop button during the first `%dist_compare` of a kernel that reads the store (a rank not
here: it imports MLflow and SQLAlchemy, seconds), in a fresh real kernel: one line in the cell,
and the next `%dist_compare` of the same kernel works. A job that ran here is compared from its
spools, without MLflow."""
from __future__ import annotations

import pytest
from jupyter_client.manager import start_new_kernel

from tests.helpers import clean_env, wait_for
from tests.magic.helpers import ANSI, run_cell

pytestmark = pytest.mark.slow

RANK = """import os
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(5):
    t.log_metric("loss", 1.0 / (step + 1) + int(os.environ["RANK_ID"]), step=step)
"""


def test_stopping_the_first_compare_leaves_one_line_and_a_working_magic(tmp_path):
    """Before: a KeyboardInterrupt through ~20 frames of plugin, MLflow and SQLAlchemy imports;
    and when it landed inside an import (where it lands depends on the machine's speed), the
    half-imported module broke every later %dist_compare of the kernel (`module
    'sqlalchemy.sql' has no attribute 'base'`). The MLflow part now holds the interrupt until it
    is done; the UI's start is interrupted at once."""
    (tmp_path / "rank.py").write_text(RANK)
    env = clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path), env=env)
    try:
        assert run_cell(kc, "%load_ext platform_plugin").ok
        job = run_cell(kc, "%dist_run --nproc 2 --backend plain python rank.py")
        assert job.ok, job.stream + "\n".join(job.error)
        fresh = "import sys; assert not {'mlflow', 'sqlalchemy'} & set(sys.modules)"
        local = run_cell(kc, "%dist_compare --no-ui")  # a job that ran here: from its spools
        assert local.ok and "rank-01" in "".join(str(d) for _kind, d in local.displays)
        assert run_cell(kc, fresh).ok  # nothing of MLflow in the kernel yet
        # rank 1's spool gone: its points are in the store only, and MLflow is imported
        next((tmp_path / "platform_logs").glob("*/tracking/rank_1.jsonl")).unlink()
        msg_id = kc.execute("%dist_compare --no-ui")
        # the interrupt lands inside MLflow's imports: SQLAlchemy's compiled modules are mapped
        wait_for(lambda: "/sqlalchemy/" in _maps(km.provisioner.process.pid), timeout=120,
                 interval=0.02, what="the kernel importing SQLAlchemy")
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=240)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=240)
        content = reply["content"]
        assert content["status"] == "error", content
        shown = [ANSI.sub("", line) for line in content["traceback"]]
        assert shown == ["KeyboardInterrupt: %dist_compare stopped: nothing was compared "
                         "(run it again; the job and its runs are untouched)"], shown
        again = run_cell(kc, "%dist_compare --no-ui", timeout=240)
        shown = again.stream + "".join(str(data) for _kind, data in again.displays)
        assert again.ok and "rank-01" in shown, "\n".join(again.error)[-3000:]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as fh:
        return fh.read()
