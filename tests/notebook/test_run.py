"""`platform-run debug|full NOTEBOOK` end to end: real kernel, real papermill, real subprocess."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import ASSETS as ASSETS_ROOT
from tests.notebook.helpers import (cell_statuses, clean_env, error_names, make_notebook,
    platform_run, read_output, run_outputs, stream_text, write_tree)

pytestmark = pytest.mark.slow
ASSETS = ASSETS_ROOT / "notebook"

PARAMS_CELL = "epochs = 1\nlr = 0.1\ndata = 'sample'\nuse_amp = False"
SHOW_PARAMS = ("import json, os\n"
               "print('PARAMS=' + json.dumps({'epochs': epochs, 'lr': lr, 'data': data, "
               "'use_amp': use_amp, 'platform_mode': platform_mode, "
               "'env_mode': os.environ.get('PLATFORM_RUN_MODE'), 'cwd': os.getcwd()}))")


def printed_params(nb) -> dict:
    line = next(l for l in stream_text(nb).splitlines() if l.startswith("PARAMS="))
    return json.loads(line[len("PARAMS="):])


def test_debug_run_succeeds_with_profile_file_and_cli_parameters(tmp_path):
    make_notebook(tmp_path / "train.ipynb", [SHOW_PARAMS], parameters=PARAMS_CELL)
    (tmp_path / "platform.toml").write_text(
        '[debug.parameters]\nepochs = 2\nlr = 0.01\ndata = "debug-sample"\n'
        '[full.parameters]\nepochs = 50\n')
    (tmp_path / "params.yaml").write_text("lr: 0.5\ndata: from-file\n")
    done = platform_run("debug", "train.ipynb", "-f", "params.yaml", "-p", "data", "cli",
                        "-p", "use_amp", "True", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [output] = run_outputs(tmp_path)
    assert output.name.endswith("-debug-train.ipynb")
    assert str(output) in done.stderr  # the path is printed
    assert "PARAMS=" in done.stdout  # cell output streamed live to the terminal
    nb = read_output(output)
    assert printed_params(nb) == {"epochs": 2, "lr": 0.5, "data": "cli", "use_amp": True,
                                  "platform_mode": "debug", "env_mode": "debug",
                                  "cwd": str(tmp_path)}
    assert set(cell_statuses(nb)) == {"completed"}


def test_failing_cell_exits_1_and_names_the_cell(tmp_path):
    make_notebook(tmp_path / "nb.ipynb", ["print('before')", "raise ValueError('bad shard 3')",
                                          "print('after')"])
    done = platform_run("debug", "nb.ipynb", "--output", "out/result.ipynb", cwd=tmp_path)
    assert done.returncode == 1
    assert "FAILED in cell" in done.stderr and "ValueError: bad shard 3" in done.stderr
    assert "raise ValueError('bad shard 3')" in done.stderr  # the failing cell's source
    nb = read_output(tmp_path / "out" / "result.ipynb")
    assert error_names(nb) == ["ValueError"]
    assert "after" not in stream_text(nb)
    assert "failed" in cell_statuses(nb)


def test_cell_timeout_is_a_failure_recorded_in_the_notebook(tmp_path):
    # (no quick cell before the slow one: on a loaded machine a print can take 2 s too)
    make_notebook(tmp_path / "slow.ipynb", ["import time\ntime.sleep(60)", "print('never')"])
    done = platform_run("debug", "slow.ipynb", "--timeout", "3", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "timed out" in done.stderr and "--timeout 3s" in done.stderr
    nb = read_output(run_outputs(tmp_path)[0])
    assert error_names(nb)[0] == "CellTimeoutError"  # not silently "completed"
    statuses = cell_statuses(nb)
    assert statuses[-2:] == ["failed", "pending"] and "never" not in stream_text(nb)


def test_notebook_without_parameters_cell_still_runs(tmp_path):
    make_notebook(tmp_path / "plain.ipynb", ["print('mode is', platform_mode, 'n', n)"])
    done = platform_run("full", "plain.ipynb", "--no-cleanup", "-p", "n", "7", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "mode is full n 7" in stream_text(read_output(run_outputs(tmp_path)[0]))


def test_unknown_kernel_is_a_config_error_listing_installed_kernels(tmp_path):
    make_notebook(tmp_path / "nb.ipynb", ["print(1)"], kernel="no-such-kernel")
    done = platform_run("debug", "nb.ipynb", cwd=tmp_path)
    assert done.returncode == 2
    assert "no-such-kernel" in done.stderr and "python3" in done.stderr
    assert not (tmp_path / "runs").exists()
    done = platform_run("debug", "nb.ipynb", "--kernel", "python3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("setup, args, code", [
    (lambda p: None, ["debug", "missing.ipynb"], "NB_MISSING"),
    (lambda p: (p / "platform.toml").write_text("[debug.parameters\n"), ["debug", "nb.ipynb"],
     "NB_PROFILE"),
    (lambda p: (p / "broken.ipynb").write_text("{not json"), ["debug", "broken.ipynb"],
     "NB_INVALID"),
])
def test_configuration_errors_exit_2_before_a_kernel_starts(tmp_path, setup, args, code):
    make_notebook(tmp_path / "nb.ipynb", ["print(1)"])
    setup(tmp_path)
    done = platform_run(*args, cwd=tmp_path)
    assert done.returncode == 2 and code in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_full_run_refuses_conflicting_variables_before_cleanup_or_kernel(tmp_path):
    code = tmp_path / "CODE"
    make_notebook(code / "nb.ipynb", ["open('ran', 'w').write('yes')"])
    write_tree(code, {"kernel_meta/op.o": "x", ".env": "RANK_START=8\n"})
    done = platform_run("full", "nb.ipynb", cwd=code, env=clean_env(RANK_START="0"))
    assert done.returncode == 2, done.stderr
    assert "RANK_START" in done.stderr and "ENV_CONFLICT" in done.stderr
    assert (code / "kernel_meta" / "op.o").exists()  # cleanup did not start
    assert not (code / "ran").exists() and not (code / "runs").exists()


def test_full_run_cleans_code_first_and_keeps_its_output(tmp_path):
    code = tmp_path / "CODE"
    make_notebook(code / "nb.ipynb", ["import os\nprint(sorted(os.listdir('.')))"])
    write_tree(code, {"kernel_meta/op.o": "x", "old.ckpt": "w", "rank_0/logs/a.txt": "l",
                      "runs/earlier.ipynb": "{}", "train.py": "print()"})
    dry = platform_run("full", "nb.ipynb", "--dry-run", cwd=code)
    assert dry.returncode == 0, dry.stderr
    assert "kernel_meta/" in dry.stdout and "old.ckpt" in dry.stdout
    assert "platform_mode = \"full\"" in dry.stdout and "PLATFORM_RUN_MODE=full" in dry.stdout
    assert (code / "kernel_meta").exists() and not run_outputs(code)[1:]  # nothing ran

    done = platform_run("full", "nb.ipynb", "--keep", "*.ckpt", cwd=code)
    assert done.returncode == 0, done.stderr
    assert not (code / "kernel_meta").exists() and not (code / "rank_0" / "logs").exists()
    assert (code / "old.ckpt").exists() and (code / "train.py").exists()
    outputs = [p.name for p in run_outputs(code)]
    assert "earlier.ipynb" in outputs and len(outputs) == 2
    # the notebook saw the cleaned folder
    assert "kernel_meta" not in stream_text(read_output(code / "runs" / outputs[0]))

    write_tree(code, {"kernel_meta/op.o": "x"})
    done = platform_run("full", "nb.ipynb", "--no-cleanup", cwd=code)
    assert done.returncode == 0 and (code / "kernel_meta" / "op.o").exists()


def test_a_full_run_refuses_a_busy_parent_before_its_cleanup_removes_anything(
        tmp_path, clean_environ):
    """A cleanup of CODE/'s parent runs (its exclusive hold, taken here): the full run says
    CLEAN_ROOT_BUSY with CODE/ untouched (it used to clean CODE/ first, then refuse). Once
    that cleanup ended, the run cleans and holds CODE/ against any other cleanup."""
    from platform_plugin.errors import ConfigError
    from platform_plugin.notebook.options import NotebookOptions
    from platform_plugin.notebook.run import cleanup_before_run, holding_code, prepare_run
    from platform_plugin.folder_locks.protocol import RootLock

    code = tmp_path / "CODE"
    make_notebook(code / "nb.ipynb", ["print(1)"])
    write_tree(code, {"kernel_meta/op.o": "x", "train.py": "print()"})
    run = prepare_run("full", code / "nb.ipynb", NotebookOptions(cwd=str(code),
                                                                 output=str(tmp_path / "o.ipynb")))
    cleaning = cleanup_before_run(run)
    parent = RootLock(tmp_path, "a cleanup of the parent").acquire(exclusive=True)
    try:
        with pytest.raises(ConfigError) as refused:
            with holding_code(run, cleaning):
                pass
    finally:
        parent.release()
    assert [p.code for p in refused.value.problems] == ["CLEAN_ROOT_BUSY"]
    assert (code / "kernel_meta" / "op.o").exists()
    with holding_code(run, cleaning) as report:
        assert report is not None and not (code / "kernel_meta").exists()
        for folder in (code, tmp_path):
            with pytest.raises(ConfigError) as busy:
                RootLock(folder, "another cleanup").acquire(exclusive=True)
            assert [p.code for p in busy.value.problems] == ["CLEAN_ROOT_BUSY"]


def test_failed_rank_via_dist_run_exits_1_with_the_root_cause_table(tmp_path):
    shutil.copy(ASSETS / "fail_rank.py", tmp_path / "fail_rank.py")
    make_notebook(tmp_path / "nb.ipynb", [
        "%load_ext platform_plugin",
        "%dist_run --nproc 2 --tracking none python fail_rank.py",
        "print('after the job')"])
    done = platform_run("full", "nb.ipynb", "--no-cleanup", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "a rank failed in cell 3" in done.stderr
    summary = done.stderr[done.stderr.index("a rank failed"):]
    assert "JobFailed" in summary and "root cause: rank 1" in summary
    assert "data shard missing" in summary and "ROOT CAUSE" in summary  # the table
    nb = read_output(run_outputs(tmp_path)[0])
    assert error_names(nb) == ["JobFailed"] and "after the job" not in stream_text(nb)
    assert cell_statuses(nb)[-2:] == ["failed", "pending"]


def test_dead_kernel_is_a_failure(tmp_path):
    make_notebook(tmp_path / "nb.ipynb", ["import os\nos._exit(3)", "print('after')"])
    done = platform_run("debug", "nb.ipynb", cwd=tmp_path)
    assert done.returncode == 1
    assert "kernel died" in done.stderr
    assert error_names(read_output(run_outputs(tmp_path)[0])) == ["DeadKernelError"]


def test_kernel_that_cannot_start_exits_1_without_a_traceback(tmp_path):
    spec = tmp_path / "jupyter" / "kernels" / "broken"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(
        {"argv": ["/bin/false", "{connection_file}"], "display_name": "broken",
         "language": "python"}))
    make_notebook(tmp_path / "nb.ipynb", ["print(1)"])
    done = platform_run("debug", "nb.ipynb", "--kernel", "broken", cwd=tmp_path,
                        env=clean_env(JUPYTER_PATH=str(tmp_path / "jupyter")))
    assert done.returncode == 1
    assert "the notebook could not be run" in done.stderr and "Traceback" not in done.stderr


def test_python_api_restores_environ_and_reports_failure(tmp_path, clean_environ):
    from platform_plugin.notebook.run import run_notebook

    make_notebook(tmp_path / "nb.ipynb", ["import os\nprint(os.environ['PLATFORM_RUN_MODE'])",
                                          "assert epochs == 3, epochs"])
    before = dict(os.environ)
    result = run_notebook(tmp_path / "nb.ipynb", "debug", parameters={"epochs": 4},
                          cwd=str(tmp_path), live=False)
    assert dict(os.environ) == before
    assert not result.ok and result.exit_code == 1
    assert result.failure.kind == "error" and result.failure.ename == "AssertionError"
    assert result.failure.evalue == "4"
    assert "debug" in stream_text(read_output(result.output))
    result = run_notebook(tmp_path / "nb.ipynb", "debug", parameters={"epochs": 3},
                          cwd=str(tmp_path), live=False)
    assert result.ok and dict(os.environ) == before


def test_timeout_when_the_kernel_ignores_the_interrupt(tmp_path, monkeypatch, clean_environ):
    """The kernel cannot be interrupted: nbclient's CellTimeoutError escapes papermill, which
    leaves the cell "completed"; the runner must still record a failed, timed-out cell."""
    from platform_plugin.notebook import run as notebook, failure as notebook_failure

    monkeypatch.setattr(notebook_failure, "INTERRUPT_GRACE_S", 2)
    make_notebook(tmp_path / "nb.ipynb", [
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
        "print('after')"])
    result = notebook.run_notebook(tmp_path / "nb.ipynb", "debug", timeout=2,
                                   cwd=str(tmp_path), live=False)
    assert not result.ok and result.failure.kind == "timeout"
    nb = read_output(result.output)
    assert error_names(nb) == ["CellTimeoutError"]
    assert cell_statuses(nb)[-2:] == ["failed", "pending"]


WATCH_SIGINT = """import signal, subprocess, sys
watcher = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
def seen(*_):
    open(sys.argv[1], "a").write("SIGINT")
signal.signal(signal.SIGINT, seen)
print("watching", flush=True)
time.sleep(120)
''', "sigint.txt"], stdout=subprocess.PIPE, text=True)  # in the kernel's process group
assert watcher.stdout.readline() == "watching\\n"
open("watcher.pid", "w").write(str(watcher.pid))
print("last cell done")"""


def test_a_good_run_sends_its_kernel_no_sigint_at_shutdown(tmp_path):
    """jupyter_client's shutdown interrupts the kernel's process group first; a SIGINT that
    met the kernel closing its last request was logged at ERROR ("KeyboardInterrupt caught in
    kernel.") in a run that succeeded. A process of the kernel's group sees every SIGINT."""
    make_notebook(tmp_path / "nb.ipynb", ["print('first')", WATCH_SIGINT])
    try:
        done = platform_run("debug", "nb.ipynb", "--output", "out.ipynb", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "last cell done" in done.stdout and "notebook succeeded" in done.stderr
        assert not (tmp_path / "sigint.txt").exists()
        assert "KeyboardInterrupt" not in done.stderr and "ERROR" not in done.stderr
    finally:  # the run's sweep normally ended the watcher already
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            os.kill(int((tmp_path / "watcher.pid").read_text()), 9)
