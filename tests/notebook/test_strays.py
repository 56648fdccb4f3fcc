"""What a notebook run's kernel started and left running - a cell's `setsid sleep 301`, in a
session of its own, outside the kernel's process group - is stopped when `platform-run full`
ends, however it ends: success, a failed cell, Ctrl-C (SIGINT to platform-run's group, as a
terminal sends it), and platform-run itself SIGKILLed (its lifeline sweeps). Real runner, real
kernel, real processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.helpers import terminal_sigint, wait_for
from tests.notebook.helpers import clean_env, make_notebook

pytestmark = pytest.mark.slow

START_STRAY = "import subprocess\nsubprocess.Popen(['setsid', 'sleep', '301'])"
THEN = {"success": "print('done')",
        "failure": "raise RuntimeError('boom')",
        "ctrl-c": "import time\nprint('waiting', flush=True)\ntime.sleep(120)",
        "sigkill": "import time\nprint('waiting', flush=True)\ntime.sleep(120)"}


def _strays_of(notebook) -> list[int]:
    """Live `sleep 301` processes started by this notebook's kernel (its PLATFORM_NOTEBOOK)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", b"301"] and f"PLATFORM_NOTEBOOK={notebook}".encode() in env:
            found.append(int(pid))
    return found


@pytest.mark.parametrize("ending", ["success", "failure", "ctrl-c", "sigkill"])
def test_nothing_the_kernel_started_is_left_after_the_run(tmp_path, ending):
    notebook = make_notebook(tmp_path / "nb.ipynb", [START_STRAY, THEN[ending]],
                             parameters="x = 1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "platform_plugin", "full", "nb.ipynb", "--output", "out.ipynb"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=clean_env(), start_new_session=True, preexec_fn=terminal_sigint)
    seen: list[str] = []  # read aside: a stray left running holds the pipe open
    threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True).start()
    try:
        if ending in ("ctrl-c", "sigkill"):
            wait_for(lambda: any("waiting" in line for line in seen) or proc.poll() is not None,
                     timeout=120, what="the cell after the one that starts the sleep")
            assert _strays_of(notebook.resolve()), "the cell's sleep did not start"
            if ending == "ctrl-c":
                os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the runner's group
            else:
                os.kill(proc.pid, signal.SIGKILL)  # the runner alone: no code of it runs
        code = proc.wait(timeout=120)
        if ending == "sigkill":  # the lifeline's sweep runs once the runner is gone
            wait_for(lambda: not _strays_of(notebook.resolve()), timeout=60,
                     what="the lifeline stopping what the kernel left")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = _strays_of(notebook.resolve())
    for pid in left:  # not to leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert code == {"success": 0, "failure": 1, "ctrl-c": 130, "sigkill": -9}[ending], "".join(seen)
    assert not left, f"left running after the run ended: {left}\n" + "".join(seen)
