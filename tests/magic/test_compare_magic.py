"""`%dist_compare` in a real kernel shows what `platform-run compare` prints of the same job: the
table and the lines under it - why the straggler is slow, where a deviating rank's end value
lies - from one rendering (comparison/rendering.py). A real 3-rank job, real trackers."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import clean_env
from tests.magic.helpers import run_cell

pytestmark = pytest.mark.slow

# rank 1 sleeps 50x longer per step than the others (the straggler however loaded the machine);
# rank 2's loss sits 5 above the others' (an outlier among three ranks: it deviates)
RANK = """import os, time
from platform_plugin import tracking
rank = int(os.environ["RANK_ID"])
t = tracking.get_tracker()
for step in range(30):
    t.log_metric("loss", 2.0 / (step + 1) + (5.0 if rank == 2 else 0.0), step=step)
    time.sleep(0.05 if rank == 1 else 0.001)
t.close()
"""


def test_the_magic_shows_the_straggler_and_deviates_lines_the_cli_prints(kernel):
    km, kc = kernel
    (kc.cwd / "flagged_rank.py").write_text(RANK)
    assert run_cell(kc, "%load_ext platform_plugin").ok
    job = run_cell(kc, f"%dist_run --nproc 3 --backend plain --log-dir {kc.log_dir} "
                       "python flagged_rank.py")
    assert job.ok, job.stream + "\n".join(job.error)
    cell = run_cell(kc, f"%dist_compare --no-ui --log-dir {kc.log_dir}")
    assert cell.ok, "\n".join(cell.error)
    [shown] = [data["text/plain"] for _kind, data in cell.displays if "text/html" in data
               and "<pre" in data["text/html"]]
    lines = shown.splitlines()
    assert any(line.startswith("straggler rank-01: its pace ") for line in lines), shown
    assert any(line.startswith("deviates rank-02: its end value") for line in lines), shown
    html = next(data["text/html"] for _kind, data in cell.displays if "<pre" in data.get("text/html", ""))
    assert "white-space:pre-wrap" in html  # the long lines wrap at the cell's width

    printed = subprocess.run([sys.executable, "-m", "platform_plugin", "compare", "--log-dir",
                              str(kc.log_dir)], cwd=kc.cwd, env=clean_env(
                                  MLFLOW_TRACKING_URI=f"sqlite:///{kc.cwd / 'mlflow.db'}"),
                             capture_output=True, text=True, timeout=300)
    assert printed.returncode == 0, printed.stderr
    # everything the cell shows under its title line, the CLI prints as one block
    assert "\n".join(lines[1:]) in printed.stdout, (shown, printed.stdout)
