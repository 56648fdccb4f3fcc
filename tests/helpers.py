"""Helpers every test area uses: paths, one clean environment, one wait_for."""
from __future__ import annotations

import os
import shutil
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
RANKTABLES = REPO / "tests" / "data" / "ranktables"  # copies of the platform's sample tables
ASSETS = REPO / "tests" / "assets"
VENV_BIN = Path(sys.executable).parent
TRACKING_ASSETS = ASSETS / "tracking"

# Variables a developer's shell (or another test) may hold that would change how jobs launch;
# the platform sets them, never this machine. Tests start from none of them.
PLATFORM_PREFIXES = ("RANK_", "DEVICE_", "MS_", "PLATFORM_", "MLFLOW_", "JOB_ID", "ASCEND_",
                     "MASTER_", "WORLD_SIZE", "LOCAL_RANK", "GLOG_v", "JPY_SESSION_NAME")


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without platform variables, the venv first on PATH, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_PREFIXES)}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def terminal_sigint() -> None:
    """A subprocess's `preexec_fn`: SIGINT as a terminal's foreground command has it. A suite
    started in the background (`make test &`, a script) ignores SIGINT - the shell's rule for
    background jobs, inherited by every child - and a process that ignores it cannot be tested
    for Ctrl-C."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(predicate, timeout: float = 60, interval: float = 0.1, what: str = "condition"):
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def process_tree(pid: int) -> list[int]:
    """`pid` and every live descendant of it (read from /proc), parents first."""
    from platform_plugin.util.procfs import parent
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                children.setdefault(parent(int(entry)), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
    tree, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


@dataclass(frozen=True)
class MlflowProcess:
    """An `mlflow server` process as /proc shows it (the CLI process: uvicorn's worker, started
    by it, shares its process group but not its command line)."""
    pid: int
    port: int | None  # its --port
    group: int  # its process group
    nice: int  # its niceness (field 19 of /proc/PID/stat)

    def answers(self) -> bool:
        """Its /health answers OK."""
        if self.port is None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False


def processes(listing: str) -> Iterator[tuple[int, list[bytes], list[str]]]:
    """(pid, /proc/<pid>/<listing> split at NUL bytes, the fields of /proc/<pid>/stat after the
    command's name) of every process; `listing` is "cmdline" or "environ". Processes gone
    meanwhile are left out."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/{listing}", "rb") as fh:
                values = fh.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].decode().split()
        except (OSError, IndexError):
            continue
        yield int(entry), values, fields


def mlflow_servers(store_dir: Path | str) -> list[MlflowProcess]:
    """The `mlflow server` processes on a store under `store_dir` (its path on their command
    line: `--backend-store-uri sqlite:///<store_dir>/mlflow.db`), e.g. the UI a kernel started."""
    marker = str(store_dir).encode()
    found = []
    for pid, args, fields in processes("cmdline"):
        if b"server" in args and b"--backend-store-uri" in args and any(marker in a for a in args):
            port = int(args[args.index(b"--port") + 1]) if b"--port" in args[:-1] else None
            found.append(MlflowProcess(pid, port, int(fields[2]), int(fields[16])))
    return found


def copy_tracking_asset(script: str, folder: Path) -> Path:
    """tests/assets/tracking/<script> copied into `folder`, with ms_regression.py when the
    script imports it (the MindSpore jobs' data and net: run as `python script.py`, a script
    imports its own folder's modules)."""
    text = (TRACKING_ASSETS / script).read_text()
    (folder / script).write_text(text)
    if "from ms_regression import" in text:
        shutil.copy(TRACKING_ASSETS / "ms_regression.py", folder / "ms_regression.py")
    return folder / script


def _can_unshare() -> str | None:
    """Why mounts cannot be made in a private namespace here, or None when they can."""
    import shutil
    import subprocess
    if os.geteuid() != 0:
        return "mounting needs root (run the suite as root to test mounts)"
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -m is not permitted here: {probe.stderr.strip()}"
    return None


# tests that mount (bind, read-only, a small tmpfs) inside `unshare -m`, as root
needs_unshare = pytest.mark.skipif(_can_unshare() is not None, reason=str(_can_unshare()))

_FILL = """
import os, sys
fd = os.open(os.path.join(sys.argv[1], "filler"), os.O_WRONLY | os.O_CREAT)
try:  # fill the tmpfs to its last block: files can still be created, not written
    while True:
        os.write(fd, b"x" * 4096)
except OSError:
    os.close(fd)
"""


def on_a_full_tmpfs(folder: Path, code: str, *args: str, env: str = ""):
    """Run Python `code` with `folder` (argv[1]; `args` follow) a 64 KiB tmpfs filled to its
    last block, in a private mount namespace (`needs_unshare`); `env`: e.g. "TMPDIR=...".
    Returns the finished process (text output)."""
    import subprocess
    argv = " ".join([str(folder), *args])
    script = (f"mount -t tmpfs -o size=64k tmpfs {folder} && {env} "
              f"{sys.executable} -c '{_FILL + code}' {argv}")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          env=clean_env(), capture_output=True, text=True, timeout=60)


def python37() -> str:
    """The interpreter of the Python 3.7 venv the `py37` tests run their ranks on (TensorFlow
    1.15, MindSpore 2.0; no platform_plugin): PYTHON37_VENV, else the repository's `.venv37`
    (`make test-compat37` creates it). Skips the test, saying why, when there is none."""
    folder = Path(os.path.abspath(os.environ.get("PYTHON37_VENV") or REPO / ".venv37"))
    python = folder / "bin" / "python"  # not resolved: the venv's, not the interpreter behind it
    if not python.exists():
        pytest.skip(f"no Python 3.7 venv at {folder}: `make test-compat37` creates it "
                    "(or set PYTHON37_VENV to one)")
    return str(python)
