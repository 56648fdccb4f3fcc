"""`platform-run debug|full` against notebooks a user really has: two cells tagged
`parameters`, hand-edited tags, a cell that stops the notebook with sys.exit(0). Real kernel,
real papermill, real subprocesses (the refusals start no kernel)."""
from __future__ import annotations

import nbformat
import pytest

from tests.helpers import terminal_sigint
from tests.notebook.helpers import cell_statuses, make_notebook, platform_run, read_output


def _two_parameters_cells(path):
    nb = make_notebook(path, ["print('epochs', epochs, flush=True)"], parameters="epochs = 1")
    notebook = nbformat.read(nb, as_version=4)
    second = nbformat.v4.new_code_cell("epochs = 1")
    second.metadata["tags"] = ["parameters"]
    notebook.cells.insert(1, second)
    nbformat.write(notebook, path)


def test_two_parameters_cells_are_refused_before_the_kernel(tmp_path):
    """Before: papermill injected `-p epochs 30` after the first tagged cell, the second one
    set `epochs = 1` again: the run trained 1 epoch and exited 0."""
    _two_parameters_cells(tmp_path / "nb.ipynb")
    done = platform_run("debug", "nb.ipynb", "-p", "epochs", "30", "--output", "out.ipynb",
                        cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "[NB_PARAMETERS_CELL]" in done.stderr and "cells 1, 2" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out.ipynb").exists()


def test_tags_that_are_not_a_list_are_refused_before_the_kernel(tmp_path):
    """Before: papermill's `'parameters' in 5` raised TypeError: exit 1, 'could not be run'."""
    path = make_notebook(tmp_path / "nb.ipynb", ["print(1)"])
    notebook = nbformat.read(path, as_version=4)
    notebook.cells[0].metadata["tags"] = 5
    nbformat.write(notebook, path)
    done = platform_run("debug", "nb.ipynb", "--dry-run", cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "[NB_INVALID]" in done.stderr, done.stderr
    assert "tags are 5" in done.stderr


@pytest.mark.slow
def test_sys_exit_0_ends_the_run_early_and_says_so(tmp_path):
    """papermill's early stop: exit 0, but the summary said 'notebook succeeded' although the
    later cells never ran; it names the cell and what was skipped now."""
    make_notebook(tmp_path / "nb.ipynb", ["import sys\nprint('before')\nsys.exit(0)",
                                          "print('never')", "print('never either')"],
                  parameters="x = 1")
    done = platform_run("debug", "nb.ipynb", "--output", "out.ipynb", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "notebook ended early at cell 3 by sys.exit(0)" in done.stderr, done.stderr
    assert "2 later code cells did not run" in done.stderr
    assert "notebook succeeded" not in done.stderr
    assert cell_statuses(read_output(tmp_path / "out.ipynb"))[-2:] == ["pending", "pending"]


def test_two_runs_that_chose_the_same_default_output_write_two_notebooks(tmp_path):
    """Two `platform-run debug nb.ipynb` started in the same second both chose
    runs/<second>-debug-nb.ipynb (free when each looked) and wrote the same file: one run's
    notebook was lost. The name is now taken (O_EXCL) when the run starts; a dry run takes none."""
    import dataclasses

    from platform_plugin.notebook.options import NotebookOptions
    from platform_plugin.notebook.run import claim_output, output_written, prepare_run

    make_notebook(tmp_path / "nb.ipynb", ["print(1)"])
    first = prepare_run("debug", tmp_path / "nb.ipynb", NotebookOptions(cwd=str(tmp_path)))
    second = dataclasses.replace(first)  # the same free name, as two runs in one second see it
    assert first.output_default and not (tmp_path / "runs").exists()  # nothing made yet
    a, b = claim_output(first), claim_output(second)
    assert a.output != b.output and a.output.exists() and b.output.exists()
    assert claim_output(a) == a  # taken once: execute() after the CLI's claim keeps the name
    explicit = prepare_run("debug", tmp_path / "nb.ipynb", NotebookOptions(
        cwd=str(tmp_path), output=str(tmp_path / "o.ipynb")))
    assert claim_output(explicit) == explicit and not (tmp_path / "o.ipynb").exists()
    assert not output_written(a, claimed=True) and not a.output.exists()  # never saved: gone


@pytest.mark.parametrize("args, name", [
    (["--profile", "p.toml"], "when holds a datetime"),  # TOML: when = 1979-05-27T07:32:00Z
    (["-f", "p.yaml"], "day holds a date"),  # YAML: day: 2020-01-01
    (["-y", "{tags: !!set {a, b}}"], "tags holds a set")])
def test_a_parameter_papermill_cannot_write_is_refused_before_the_kernel(tmp_path, args, name):
    """Before: the dry run passed, and the real run started and failed in papermill: 'the
    notebook could not be run: TypeError: Object of type datetime is not JSON serializable'."""
    make_notebook(tmp_path / "nb.ipynb", ["print(1)"], parameters="when = day = tags = None")
    (tmp_path / "p.toml").write_text("[debug.parameters]\nwhen = 1979-05-27T07:32:00Z\n")
    (tmp_path / "p.yaml").write_text("day: 2020-01-01\n")
    done = platform_run("debug", "nb.ipynb", *args, "--dry-run", cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "[NB_PARAMS]" in done.stderr, done.stderr
    assert name in done.stderr and "Quote it" in done.stderr


@pytest.mark.slow
def test_a_reader_that_goes_away_does_not_stop_the_run(tmp_path):
    """`platform-run debug nb.ipynb | head -1`, a tee or ssh pipe that closed: before, the next
    live write raised BrokenPipeError in papermill's output hook and the run stopped mid-notebook
    ('the notebook could not be run: BrokenPipeError', exit 1)."""
    import subprocess
    import sys

    from tests.notebook.helpers import clean_env
    make_notebook(tmp_path / "nb.ipynb", ["for i in range(20000): print('line', i)",
                                          "print('last cell ran')"], parameters="x = 1")
    proc = subprocess.Popen([sys.executable, "-m", "platform_plugin", "debug", "nb.ipynb",
                             "--output", "out.ipynb"], cwd=tmp_path, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"line 0")
    proc.stdout.close()  # the reader is gone
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=240) == 0, err
    assert "notebook succeeded" in err and "Traceback" not in err
    nb = read_output(tmp_path / "out.ipynb")
    assert set(cell_statuses(nb)) == {"completed"}
    assert "last cell ran" in str(nb.cells[-1].outputs)



@pytest.mark.slow
def test_a_runner_started_with_closed_std_fds_runs_the_notebook(tmp_path):
    """`platform-run debug nb.ipynb >&- 2>&- <&-` (a scheduler or a daemon that closes them): the
    runner's next open file took descriptor 1 close-on-exec, the kernel inherited a closed
    stdout and died in ipykernel ('NoneType' object has no attribute 'fileno'): "Kernel died
    before replying to kernel_info", exit 1, no notebook. ipykernel watches the descriptors
    1-2 (where the crash was) only when PYTEST_CURRENT_TEST is not in its environment: without
    it here, this test failed on the old code (with it, the kernel skipped the watch and ran)."""
    import subprocess
    import sys

    from tests.notebook.helpers import clean_env
    make_notebook(tmp_path / "nb.ipynb", ["print('the cell ran')"], parameters="x = 1")
    env = {k: v for k, v in clean_env().items() if k != "PYTEST_CURRENT_TEST"}  # as a user's
    done = subprocess.run(["sh", "-c", 'exec "$@" >&- 2>&- <&-', "sh", sys.executable, "-m",
                           "platform_plugin", "debug", "nb.ipynb", "--output", "out.ipynb"],
                          cwd=tmp_path, env=env, timeout=240)
    assert done.returncode == 0  # (nothing to read: stderr is closed too)
    nb = read_output(tmp_path / "out.ipynb")
    assert set(cell_statuses(nb)) == {"completed"} and "the cell ran" in str(nb.cells[-1].outputs)


@pytest.mark.slow
def test_ctrl_c_while_the_kernel_starts_ends_as_an_interrupt(tmp_path):
    """Ctrl-C after the kernel's process started but before it answered: the runner passed the
    SIGINT on to the kernel, which had no handler yet and died of it (its KeyboardInterrupt
    traceback on the terminal, "Kernel died before replying to kernel_info", exit 1 "could not
    be run"). Now the starting kernel is killed and the run ends as an interrupt (130). The
    kernelspec's start is slowed down to make the moment certain (a loaded machine's is seconds)."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from tests.notebook.helpers import clean_env
    spec = tmp_path / "jupyter" / "kernels" / "slowstart"
    spec.mkdir(parents=True)
    start = ("import sys, time; print('kernel starting', file=sys.stderr, flush=True); "
             "time.sleep(30); from ipykernel import kernelapp; kernelapp.launch_new_instance()")
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-c", start, "-f", "{connection_file}"],
        "display_name": "slow start", "language": "python"}))
    make_notebook(tmp_path / "nb.ipynb", ["print('never')"], parameters="x = 1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "platform_plugin", "debug", "nb.ipynb", "--kernel", "slowstart",
         "--output", "out.ipynb"], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
        env=clean_env(JUPYTER_PATH=str(tmp_path / "jupyter")), start_new_session=True,
        preexec_fn=terminal_sigint)
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "kernel starting" in line:
                os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the runner's group
                break
        seen.append(proc.stderr.read())
        assert proc.wait(timeout=60) == 130, "".join(seen)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _environ_has(
        pid, f"JUPYTER_PATH={tmp_path / 'jupyter'}")], "the starting kernel was left running"
    err = "".join(seen)
    assert "Traceback" not in err and "Kernel died" not in err, err
    assert "[platform-run] interrupted" in err, err


def _environ_has(pid: str, entry: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return entry.encode() in handle.read().split(b"\0")
    except OSError:
        return False


def test_an_outputs_folder_that_is_a_file_is_refused_before_the_kernel(tmp_path):
    """`out.outputs` (where a cell's long output goes) as a file: the run stopped at the first
    cell that printed more than the notebook keeps ("could not be saved (File exists)")."""
    make_notebook(tmp_path / "nb.ipynb", ["print(1)"], parameters="x = 1")
    (tmp_path / "out.outputs").write_text("a file of the user's")
    done = platform_run("debug", "nb.ipynb", "--output", "out.ipynb", cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "[NB_OUTPUT]" in done.stderr, done.stderr
    assert "out.outputs is not a folder" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out.ipynb").exists()
    assert (tmp_path / "out.outputs").read_text() == "a file of the user's"
