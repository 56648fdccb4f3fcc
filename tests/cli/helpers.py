"""Run `platform-run` in-process (fast, for corpora) or as a real subprocess, and judge the
outcome the way a user would: exit code, an error code in the message, no traceback, and
nothing left behind in the working folder."""
from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import VENV_BIN, clean_env

CODE = re.compile(r"\[[A-Z][A-Z0-9_]+\]|\"code\": \"[A-Z][A-Z0-9_]+\"")  # text or --json
HANG_S = 20  # a case still running after this is a hang


@dataclass
class Outcome:
    argv: list[str]
    rc: int | None
    out: str
    err: str
    created: list[str] = field(default_factory=list)
    traceback: str = ""

    @property
    def text(self) -> str:
        return self.out + self.err

    def refused_cleanly(self) -> bool:
        return self.rc == 2 and bool(CODE.search(self.text)) and not self.created \
            and not self.traceback and "Traceback" not in self.text


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


class _Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise _Hang()


def run_inprocess(argv: list[str], cwd: Path) -> Outcome:
    """`platform_plugin.cli.main(argv)` in `cwd` with captured output and a hang alarm."""
    from platform_plugin.cli import main

    before = snapshot(cwd)
    out, err = io.StringIO(), io.StringIO()
    previous_dir = os.getcwd()
    previous_alarm = signal.signal(signal.SIGALRM, _alarm)
    rc, trace = None, ""
    os.chdir(cwd)
    signal.alarm(HANG_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except SystemExit as exc:  # argparse
        rc = exc.code if isinstance(exc.code, int) else 1
    except _Hang:
        trace = f"HANG: still running after {HANG_S}s"
    except BaseException:  # noqa: BLE001 - exactly what the corpus looks for
        trace = traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous_alarm)
        os.chdir(previous_dir)
    created = sorted(snapshot(cwd) - before)
    return Outcome(list(argv), rc, out.getvalue(), err.getvalue(), created, trace)


def run_subprocess(argv: list[str], cwd: Path, env: dict | None = None,
                   hang_s: float = HANG_S) -> Outcome:
    """`hang_s`: a refusal is immediate, but a case that really runs (a kernel) needs longer."""
    before = snapshot(cwd)
    try:
        proc = subprocess.run([str(VENV_BIN / "platform-run"), *argv], cwd=cwd,
                              env=env or clean_env(), capture_output=True, text=True,
                              timeout=hang_s, stdin=subprocess.DEVNULL)
        rc, out, err, trace = proc.returncode, proc.stdout, proc.stderr, ""
    except subprocess.TimeoutExpired as exc:
        rc, out, err = None, str(exc.stdout or ""), str(exc.stderr or "")
        trace = f"HANG: still running after {hang_s}s"
    created = sorted(snapshot(cwd) - before)
    return Outcome(list(argv), rc, out, err, created, trace)
