"""notebook/bounded.py against what Jupyter shows for the same cell: a cell whose output spilled
into its file keeps `clear_output` (with a display between the clear and the next print: a live
plot in a training loop) and display handles updated later (nbclient finds a display by its
index in the cell's outputs). Real kernel, real papermill, in this process with small bounds."""
from __future__ import annotations

import nbformat
import papermill
import pytest

from platform_plugin.notebook import bounded
from tests.notebook.helpers import make_notebook

pytestmark = pytest.mark.slow

LIVE_PLOT = """from IPython.display import clear_output, display
for i in range(30):
    clear_output(wait=True)
    display({'text/plain': f'plot {i}'}, raw=True)
    print('x' * %d, f'step {i}')"""

HANDLE = """from IPython.display import display
print('y' * 3000)
handle = display({'text/plain': 'before'}, raw=True, display_id=True)
print('z' * 300)"""


@pytest.fixture
def small_bounds(monkeypatch):
    monkeypatch.setattr(bounded, "HEAD", 1000)
    monkeypatch.setattr(bounded, "TAIL", 1000)
    monkeypatch.setattr(bounded, "CELL_KEEP", 2000)


def run(tmp_path, cells):
    make_notebook(tmp_path / "in.ipynb", cells)
    papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"),
                               engine_name=bounded.ENGINE, kernel_name="python3",
                               progress_bar=False, cwd=str(tmp_path))
    nb = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    nbformat.validate(nb)  # a display update written into a stream output is invalid
    return nb


def texts(cell) -> list[str]:
    return [o.get("text") or o.get("data", {}).get("text/plain", "") for o in cell.outputs]


@pytest.mark.parametrize("width", [200, 1500], ids=["small", "spilled"])
def test_a_cleared_cell_shows_what_followed_the_last_clear(tmp_path, small_bounds, width):
    nb = run(tmp_path, [LIVE_PLOT % width])
    shown = texts(nb.cells[0])
    # Jupyter shows 'plot 29' and the step 29 line; the notebook lost the line (old code)
    assert "plot 29" in shown and any("step 29" in t for t in shown), shown
    assert not any("step 28" in t for t in shown), shown  # cleared: not in the notebook
    whole = tmp_path / "out.outputs" / "cell-1.txt"
    if width < 1000:  # what the cell shows at any time is small: nothing spills
        assert not whole.exists() and not any(bounded.NOTE_MARK in t for t in shown), shown
    else:  # the file is named first; it has every step
        assert bounded.NOTE_MARK in shown[0], shown
        assert all(f"step {i}\n" in whole.read_text() for i in range(30))


def test_a_display_updated_later_is_the_one_updated(tmp_path, small_bounds):
    nb = run(tmp_path, [HANDLE, "handle.update({'text/plain': 'after'}, raw=True)"])
    shown = texts(nb.cells[0])
    assert "after" in shown and "before" not in shown, shown
    assert any(t.endswith("z" * 300 + "\n") for t in shown), shown


def test_a_rerun_into_the_same_output_leaves_no_earlier_cell_file(tmp_path, small_bounds):
    run(tmp_path, ["print('w' * 3000)"])
    whole = tmp_path / "out.outputs" / "cell-1.txt"
    assert whole.read_text() == "w" * 3000 + "\n"
    (tmp_path / "out.outputs" / "notes.md").write_text("the user's")  # not ours: stays
    nb = run(tmp_path, ["print('short')"])  # the same --output again: its cell 1 is small
    assert texts(nb.cells[0]) == ["short\n"] and not whole.exists()
    assert (tmp_path / "out.outputs" / "notes.md").read_text() == "the user's"
