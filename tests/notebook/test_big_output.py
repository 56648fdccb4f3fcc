"""A cell that prints tens of MB: the runner kept every output in memory and wrote all of it into
the notebook at every save (100 MB printed: runner RSS 1.1 GB, a 100 MB .ipynb JupyterLab cannot
open). Now the cell keeps its first and last 512 K characters with a note between them naming
`<output>.outputs/cell-N.txt`, which holds the cell's whole output; the terminal gets every line.
Real kernel, real papermill."""
from __future__ import annotations

import re

import pytest

from platform_plugin.notebook.bounded import HEAD, NOTE_MARK, TAIL
from tests.notebook.helpers import make_notebook, platform_run, read_output

pytestmark = pytest.mark.slow

LINES = 200_000  # x 101 characters: ~20 MB
CELL = ("import sys\nfor i in range(%d):\n    print(f'{i:>9} ' + 'x' * 90)\n"
        "    if i %% 50_000 == 0: print(f'warning {i}', file=sys.stderr)" % LINES)


def test_a_cell_that_prints_20_mb_keeps_its_start_and_end_and_the_rest_in_a_file(tmp_path):
    make_notebook(tmp_path / "nb.ipynb", [CELL, "print('the next cell ran')"])
    done = platform_run("debug", "nb.ipynb", "--output", "out.ipynb", cwd=tmp_path, timeout=300)
    assert done.returncode == 0 and "notebook succeeded" in done.stderr, done.stderr[-2000:]
    assert done.stdout.count("\n") == LINES + 1  # the terminal still got every line
    size = (tmp_path / "out.ipynb").stat().st_size
    assert size < 2 * (HEAD + TAIL), size  # was the whole 20 MB
    nb = read_output(tmp_path / "out.ipynb")
    at = next(i for i, c in enumerate(nb.cells) if c.source == CELL)  # after the injected one
    cell = nb.cells[at]
    notes = [o for o in cell.outputs if o.output_type == "stream" and NOTE_MARK in o.text]
    assert len(notes) == 1, [o.get("text", "")[:80] for o in cell.outputs]
    whole = tmp_path / "out.outputs" / f"cell-{at + 1}.txt"
    assert str(whole) in notes[0].text and "characters of this cell's output are left out" \
        in notes[0].text
    assert f"whole output of cell {at + 1} (kept shorter in the notebook): {whole.parent}" \
        in done.stderr, done.stderr[-2000:]
    text = whole.read_text()  # stderr may come between a print's text and its newline
    assert re.findall(r"warning (\d+)\n", text) == [str(i) for i in range(0, LINES, 50_000)]
    numbers = [int(n) for n in re.findall(r"(\d+) x{90}", text)]
    assert numbers == list(range(LINES))  # every line, in order, once
    stdout = "".join(o.text for o in cell.outputs if o.output_type == "stream"
                     and o.name == "stdout")
    assert stdout.startswith(f"{0:>9} ") and stdout.endswith(f"{LINES - 1:>9} " + "x" * 90 + "\n")
    assert len(stdout) <= HEAD + TAIL
    assert "the next cell ran" in str(nb.cells[at + 1].outputs)
