"""A notebook run by `platform-run debug` (papermill) runs a `%dist_run --background` job in the
foreground, says so once, and fails the run when a rank fails: nobody is there to attach, and
a full run must not succeed over a failed rank."""
from __future__ import annotations

import pytest

from tests.launcher.helpers import BEHAVE
from tests.notebook.helpers import make_notebook, platform_run, read_output, run_outputs

pytestmark = pytest.mark.slow


def test_a_background_job_of_a_notebook_run_runs_in_the_foreground(tmp_path):
    make_notebook(tmp_path / "nb.ipynb", [
        "%load_ext platform_plugin",
        f"%dist_run --background --nproc 2 --tracking none --grace 1 python {BEHAVE} crash",
        "print('never reached')"])
    done = platform_run("debug", "nb.ipynb", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    said = "--background: a notebook run by platform-run debug|full runs the job in the foreground"
    [output] = run_outputs(tmp_path)
    text = "".join(o.get("text", "") for c in read_output(output).cells
                   for o in c.get("outputs", []) if o.output_type == "stream")
    assert text.count(said) == 1, text
    assert "ROOT CAUSE" in done.stderr and "never reached" not in text
