"""`platform-run debug|full` against what a hostile machine or user does to a run: the disk
under the output notebook fills up, the runner is interrupted before its first cell.
Real kernels, real papermill, real subprocesses; the full disk is a small tmpfs mounted in a
private mount namespace (`unshare -m`, as root)."""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Iterator

import nbformat
import pytest

from tests.helpers import clean_env, needs_unshare
from tests.notebook.helpers import make_notebook, read_output

pytestmark = pytest.mark.slow


@needs_unshare
def test_a_full_disk_under_the_output_keeps_the_last_good_save(tmp_path):
    """Before: papermill rewrote the .ipynb in place, the disk filled mid-write and left a
    truncated, unreadable notebook; the error was 'the notebook could not be run: OSError'."""
    make_notebook(tmp_path / "big.ipynb", ["print('a' * 300_000)", "print('never reached')"],
                  parameters="x = 1")
    out = tmp_path / "small" / "out.ipynb"
    out.parent.mkdir()
    run = shlex.join([sys.executable, "-m", "platform_plugin", "debug", "big.ipynb",
                      "--output", str(out)])
    script = f"mount -t tmpfs -o size=200k tmpfs {shlex.quote(str(out.parent))} && {run} ; " \
             f"rc=$?; cp {shlex.quote(str(out))} {shlex.quote(str(tmp_path / 'kept.ipynb'))}; " \
             f"ls -a {shlex.quote(str(out.parent))}; exit $rc"
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "output notebook could not be saved (No space left on device)" in done.stderr
    assert "Traceback" not in done.stderr[-3000:]
    nb = read_output(tmp_path / "kept.ipynb")  # a valid notebook: the last good save
    nbformat.validate(nb)
    assert "never reached" not in str(nb.cells[-1].get("outputs"))
    assert ".partial" not in done.stdout  # no temporary file left on the full disk


@contextlib.contextmanager
def _running(mode: str, notebook: str, output, cwd, **popen) -> Iterator[subprocess.Popen]:
    """`platform-run MODE NOTEBOOK --output OUTPUT` in its own session, stderr piped; the
    whole session is SIGKILLed at the end if it still runs."""
    proc = subprocess.Popen([sys.executable, "-m", "platform_plugin", mode, notebook, "--output",
                             str(output)], cwd=cwd, env=clean_env(), stderr=subprocess.PIPE,
                            text=True, start_new_session=True, **popen)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _interrupted_run(tmp_path, wait_for_line: str, signum: int = signal.SIGINT
                     ) -> tuple[int, str]:
    """`platform-run debug` of a notebook that never ends, SIGINT (as Ctrl-C) once stderr
    shows `wait_for_line`. The child's SIGINT is reset to the default: a test runner started
    in the background would hand its children an ignored SIGINT."""
    make_notebook(tmp_path / "forever.ipynb",
                  ["import sys, time\nprint('cell started', file=sys.stderr, flush=True)\n"
                   "time.sleep(600)"], parameters="x = 1")
    seen = []
    with _running("debug", "forever.ipynb", "out.ipynb", tmp_path,
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as proc:
        for line in proc.stderr:
            seen.append(line)
            if wait_for_line in line:
                proc.send_signal(signum)
                break
        seen.append(proc.stderr.read())
        return proc.wait(timeout=60), "".join(seen)


def test_ctrl_c_before_the_first_cell_points_at_no_notebook(tmp_path):
    """Before: 'interrupted; the notebook so far: out.ipynb' - a file that did not exist."""
    rc, err = _interrupted_run(tmp_path, "[platform-run] debug run of")
    assert rc == 130, err
    assert "interrupted before the notebook started; no output notebook was written" in err
    assert "Traceback" not in err and not (tmp_path / "out.ipynb").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_in_a_cell_points_at_the_notebook_so_far(tmp_path, signum):
    """SIGTERM (the platform stopping a run) used to kill the runner silently (exit -15)."""
    rc, err = _interrupted_run(tmp_path, "cell started", signum)
    assert rc == 130, err
    assert f"interrupted; the notebook so far: {tmp_path / 'out.ipynb'}" in err
    # before: the kernel's own "Exception in message handler ... ZMQError" traceback
    assert "Traceback" not in err and "ZMQError" not in err, err
    # the cell was interrupted as by Jupyter's stop button: the notebook records it
    outputs = read_output(tmp_path / "out.ipynb").cells[-1].outputs
    assert [o.get("ename") for o in outputs if o.output_type == "error"] == ["KeyboardInterrupt"]


def test_a_cell_that_ignores_the_interrupt_ends_at_the_second_signal_quietly(tmp_path):
    make_notebook(tmp_path / "stubborn.ipynb",
                  ["import signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                   "print('cell started', file=sys.stderr, flush=True)\ntime.sleep(600)"],
                  parameters="x = 1")
    with _running("debug", "stubborn.ipynb", "out.ipynb", tmp_path) as proc:
        for line in proc.stderr:
            if "cell started" in line:
                break
        proc.send_signal(signal.SIGTERM)
        time.sleep(1)  # the first one reached the kernel, which ignores it
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 130, err
    assert "interrupted; the notebook so far" in err and "Traceback" not in err, err
    kernels = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cwd(pid) == str(tmp_path)]
    assert kernels == []  # the busy kernel was killed, not left behind


# The runner's own engine and interrupt handling, with the loop run 3 s more after the second
# signal: papermill's cleanup of the killed kernel takes that long on a loaded machine, long
# enough for the abandoned cell's tasks to see the kernel die (a full suite run printed
# "Task exception was never retrieved" and DeadKernelError's traceback after "interrupted").
SLOW_CLEANUP = """
import asyncio, os, signal, sys, threading, time
from pathlib import Path
import papermill
from jupyter_core.utils import run_sync
from platform_plugin.notebook.bounded import ENGINE
from platform_plugin.notebook.interrupt import interruptible

started = Path("started")
def signals():
    while not started.exists():
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=signals, daemon=True).start()
try:
    with interruptible() as interrupts:
        papermill.execute_notebook("stubborn.ipynb", "out.ipynb", engine_name=ENGINE,
                                   kernel_name="python3", progress_bar=False, cwd=".",
                                   **interrupts.engine_options({}))
except KeyboardInterrupt:
    run_sync(asyncio.sleep)(3)
    print("interrupted", file=sys.stderr)
"""


def test_the_abandoned_cell_reports_nothing_when_the_kernel_dies_after_the_second_signal(
        tmp_path):
    make_notebook(tmp_path / "stubborn.ipynb",
                  ["import pathlib, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                   "pathlib.Path('started').touch()\ntime.sleep(600)"])
    done = subprocess.run([sys.executable, "-c", SLOW_CLEANUP], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=180)
    assert done.stderr.rstrip().endswith("interrupted"), done.stderr
    assert "Traceback" not in done.stderr and "Kernel died" not in done.stderr, done.stderr


def _cwd(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""
    nbformat.validate(read_output(tmp_path / "out.ipynb"))


@pytest.mark.parametrize("mode", ["full", "debug"])
def test_a_second_full_run_or_clean_never_removes_what_a_running_run_writes(tmp_path, mode):
    """Before: a second `platform-run full` on the same CODE/ cleaned it while the first one
    ran, removing the checkpoint and the log the first run was writing; a debug run held
    nothing at all (a clean meanwhile removed what its first cell wrote for the next ones)."""
    code = tmp_path / "CODE"
    make_notebook(code / "train.ipynb",
                  ["import sys, time\nopen('model.ckpt', 'w').write('weights')\n"
                   "open('train.log', 'w').write('epoch 1')\n"
                   "print('cell started', file=sys.stderr, flush=True)\ntime.sleep(600)"],
                  parameters="x = 1")
    with _running(mode, "train.ipynb", tmp_path / "first.ipynb", code) as first:
        for line in first.stderr:
            if "cell started" in line:
                break
        assert (code / "model.ckpt").exists()
        second = subprocess.run(
            [sys.executable, "-m", "platform_plugin", "full", "train.ipynb", "--output",
             str(tmp_path / "second.ipynb")], cwd=code, env=clean_env(), capture_output=True,
            text=True, timeout=60)
        clean = subprocess.run([sys.executable, "-m", "platform_plugin", "clean"], cwd=code,
                               env=clean_env(), capture_output=True, text=True, timeout=120)
        for done in (second, clean):
            assert done.returncode == 2, done.stderr
            assert "[CLEAN_ROOT_BUSY]" in done.stderr and f"a {mode} run of train.ipynb" in \
                done.stderr, done.stderr
        assert (code / "model.ckpt").read_text() == "weights"
        assert (code / "train.log").exists() and not (tmp_path / "second.ipynb").exists()
    # the lock died with its holder (SIGKILL): CODE/ can be cleaned again
    clean = subprocess.run([sys.executable, "-m", "platform_plugin", "clean"], cwd=code,
                           env=clean_env(), capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    assert not (code / "model.ckpt").exists() and not (code / "train.log").exists()


def test_sigterm_while_a_full_run_cleans_code_ends_as_ctrl_c(tmp_path):
    """Before: the SIGTERM handler came only with the notebook's start: a SIGTERM (the platform
    stopping the run) during the cleanup of CODE/ killed the runner silently (exit -15)."""
    code = tmp_path / "CODE"
    make_notebook(code / "train.ipynb", ["print('never')"], parameters="x = 1")
    cache = code / "kernel_meta"
    cache.mkdir()
    for i in range(20_000):  # long enough a cleanup to be caught in the middle
        (cache / f"op{i}.o").touch()
    with _running("full", "train.ipynb", tmp_path / "out.ipynb", code) as run:
        deadline = time.monotonic() + 120
        while len(os.listdir(cache)) == 20_000 and time.monotonic() < deadline:
            time.sleep(0.005)  # until the cleanup has begun
        run.send_signal(signal.SIGTERM)
        err = run.stderr.read()
        assert run.wait(timeout=60) == 130, err
    assert "interrupted" in err and "Traceback" not in err, err
    assert not (tmp_path / "out.ipynb").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_an_output_that_is_a_device_is_written_in_place_never_replaced(tmp_path):
    """`--output /dev/null` is a papermill habit: the atomic save must not rename a regular
    file over the device node (tested on a private copy of /dev/null, never the real one)."""
    import stat

    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    make_notebook(tmp_path / "nb.ipynb", ["print('ran')"], parameters="x = 1")
    done = subprocess.run([sys.executable, "-m", "platform_plugin", "debug", "nb.ipynb",
                           "--output", str(null)], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".partial")]
