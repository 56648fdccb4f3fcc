"""Hang diagnosis: every rank's Python stack, taken from outside with py-spy before a stuck job
is stopped (`--timeout`, `--silence-timeout`, an interrupt).

`py-spy dump --pid P` reads the stack of a running interpreter without stopping it for long and
without any code in the rank (it needs ptrace: root, or the same user with ptrace allowed). A
rank stuck in a collective shows the collective's Python frame on top; one stuck in data
loading shows the loader. The dumps go into each rank's log, into `<job>/stacks/rank_N.txt`
(tracking attaches them to the rank's run) and their innermost frames into the result table.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from platform_plugin.launcher.display.output import Output

DUMP_TIMEOUT_S = 10.0  # all ranks are dumped at once; a stop never waits longer for them
STACK_DIR = "stacks"
_THREAD = re.compile(r"^Thread (\d+) \(([^)]*)\)(?::\s*\"([^\"]*)\")?")


@dataclass
class StackDump:
    pid: int
    text: str = ""
    frames: list[str] = field(default_factory=list)  # the main thread's, innermost first
    error: str = ""


def py_spy() -> str | None:
    """The py-spy next to this interpreter (the venv's bin), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def main_thread_frames(text: str, pid: int) -> list[str]:
    """Frames of the thread whose id is the pid (the main thread), else of the first thread."""
    threads: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        match = _THREAD.match(line)
        if match:
            threads.append((match.group(1), match.group(3) or "", []))
        elif threads and line.startswith("    ") and line.strip():
            threads[-1][2].append(line.strip())
    if not threads:
        return []
    main = next((t for t in threads if t[0] == str(pid) or t[1] == "MainThread"), threads[0])
    return main[2]


def _candidates(pid: int) -> list[int]:
    """The rank's process, then its Python descendants (a shell wrapper runs python as a child)."""
    pids = [pid]
    try:
        import psutil
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if "python" in child.name().lower():
                    pids.append(child.pid)
            except psutil.Error:
                continue
    except Exception:  # noqa: BLE001 - psutil missing or the rank just ended
        pass
    return pids


def _plain_env() -> dict[str, str]:
    """py-spy without colours: a Jupyter kernel sets CLICOLOR_FORCE (coloured output of its
    subprocesses), which py-spy obeys even into a pipe - the escape codes then hid every frame
    from `main_thread_frames` ("(no frames)") and landed in stacks/ and the rank logs."""
    env = {k: v for k, v in os.environ.items() if k not in ("CLICOLOR_FORCE", "FORCE_COLOR")}
    env["NO_COLOR"] = "1"
    return env


def dump_one(pid: int, exe: str | None, timeout: float) -> StackDump:
    if exe is None:
        return StackDump(pid, error="py-spy not installed (pip install py-spy)")
    last = StackDump(pid, error="no Python process")
    for candidate in _candidates(pid):
        try:
            done = subprocess.run([exe, "dump", "--pid", str(candidate)], capture_output=True,
                                  text=True, timeout=timeout, env=_plain_env())
        except (OSError, subprocess.SubprocessError) as exc:
            return StackDump(candidate, error=f"py-spy: {type(exc).__name__}: {exc}")
        if done.returncode == 0 and done.stdout.strip():
            return StackDump(candidate, done.stdout, main_thread_frames(done.stdout, candidate))
        last = StackDump(candidate, error=f"py-spy: {(done.stderr or done.stdout).strip()[-200:]}")
    return last


def dump_all(pids: dict[str, int], timeout: float = DUMP_TIMEOUT_S) -> dict[str, StackDump]:
    """name -> dump of every rank, taken in parallel (bounded by `timeout` overall)."""
    exe = py_spy()
    out: dict[str, StackDump] = {}

    def run(name: str, pid: int) -> None:
        out[name] = dump_one(pid, exe, timeout)

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in pids.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 1)
    return {name: out.get(name, StackDump(pid, error="py-spy timed out")) for name, pid in pids.items()}


def save(job_dir: str, name: str, dump: StackDump) -> str:
    """`<job>/stacks/rank_<name>.txt`; the path."""
    folder = Path(job_dir) / STACK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{'sched' if name == 'sched' else f'rank_{name}'}.txt"
    path.write_text(dump.text or f"(no stack: {dump.error})\n")
    return os.fspath(path)


def log_block(dump: StackDump, why: str) -> bytes:
    """What goes into the rank's log."""
    body = dump.text.rstrip() if dump.text else f"(no stack: {dump.error})"
    return f"\n[launcher] Python stack of pid {dump.pid} when the job was stopped ({why}):\n{body}\n".encode()


def dump_live(live: dict[str, int], output: Output, job_dir: str,
              why: str) -> dict[str, list[str]]:
    """The supervisor's dump before a stop: each live rank's stack into its log (`output`),
    `<job_dir>/stacks` and the result (returned: name -> innermost frames)."""
    frames = {}
    for name, dump in dump_all(live).items():
        frames[name] = dump.frames or [f"({dump.error or 'no frames'})"]
        output.log_only(name, log_block(dump, why))
        save(job_dir, name, dump)
    output.note(f"Python stack of every rank saved in {os.path.join(job_dir, STACK_DIR)} and "
                "the rank logs")
    return frames

