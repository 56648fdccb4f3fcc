"""A job that runs while its starter does other things: `%dist_run --background`,
`launch(..., background=True)`, `--detach`, `platform-run launch --detach`.

The job's launcher is the same launcher, in a process of its own (child.py), in a session of its
own: the kernel's interrupts and a restart's SIGKILL of the kernel's process group do not reach
it. How long it lives:
- background: as long as the process that started it. That process holds a lifeline
  (processes/spawn.Lifeline, the ranks' own mechanism) on the launcher's group: when it ends
  for any reason (a kernel restart or shutdown, a SIGKILL), the lifeline sends the launcher
  SIGTERM - which stops the job as the stop button does - and SIGKILL STOP_MARGIN_S past the
  job's grace. A page reload, a closed tab or other cells change nothing: the kernel lives.
- detached: no lifeline; the job survives its starter, and `platform-run attach|jobs|stop`
  manage it.
The handle (handle.py: `BackgroundJob`) and everything else read the job from its folder
(records.py), so a job started elsewhere is managed the same way.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import IO, Callable

from platform_plugin.errors import ConfigError, PlatformPluginError, Problem
from platform_plugin.launcher.jobs.handle import BackgroundJob
from platform_plugin.launcher.options import FIELDS, LaunchOptions
from platform_plugin.launcher.processes.spawn import Lifeline, piped
from platform_plugin.variables import PLATFORM_NOTEBOOK_RUN

# the job's process says on its stdout (child.py) that the job folder is its own, or why not
READY_MARK = "PLATFORM-JOB-READY"
REFUSED_MARK = "PLATFORM-JOB-REFUSED"
STOP_MARGIN_S = 60.0  # past the grace: the stacks, the result, tracking's end record
# options the job's own launcher does not take: its display is the files (show none), its
# caller gets the result from the handle (check), and it is the background process itself
NOT_PASSED = ("write", "check", "show", "background", "detach")
# ipykernel sets these in every kernel so that a cell's subprocesses colour the cell; the job's
# launcher is no cell's subprocess (launcher/api.py drops them for a kernel's ranks likewise)
KERNEL_ONLY = ("FORCE_COLOR", "CLICOLOR_FORCE")


def runs_in_foreground() -> bool:
    """A notebook run by `platform-run debug|full` (papermill) runs a background job in the
    foreground: the run must fail when a rank fails, and nobody is there to attach."""
    return bool(PLATFORM_NOTEBOOK_RUN.get())


def child_options(options: LaunchOptions) -> dict:
    """The options as the job's own launcher takes them (JSON)."""
    values = {name: getattr(options, name) for name in FIELDS if name not in NOT_PASSED}
    values.update(check=False, show="none")
    return values


def child_environment(environ: dict[str, str]) -> dict[str, str]:
    env = dict(environ)
    if env.get("MPLBACKEND", "").startswith("module://matplotlib_inline"):
        del env["MPLBACKEND"]
    if "ipykernel" in sys.modules:
        for name in KERNEL_ONLY:
            if env.get(name) == "1":
                del env[name]
    return env


def start_background(command: list[str] | str, options: LaunchOptions,
                     say: Callable[[str], object]) -> BackgroundJob:
    """Start the job's launcher in its own process and return once the job folder is its own
    (the job id known), or raise its refusal (ConfigError, nothing created). `say`: the
    launcher's notes meanwhile (`--nproc not given: ...`)."""
    how = "detached" if options.detach else "background"
    spec = {"command": command if isinstance(command, list) else command,
            "options": child_options(options), "how": how}
    lifeline = None if options.detach else Lifeline.for_groups(options.grace + STOP_MARGIN_S)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "platform_plugin.launcher.jobs.child"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env=child_environment(dict(os.environ)))
    except BaseException:
        if lifeline is not None:
            lifeline.release()
        raise
    if lifeline is not None:
        lifeline.add(process.pid)  # its group: pid == pgid (a new session)
    try:
        stdin = piped(process.stdin)
        stdin.write(json.dumps(spec).encode())
        stdin.close()
        ready = _until_ready(piped(process.stdout), say)
    except BaseException:  # Ctrl-C while it starts: it stops as any interrupted launch
        _abandon(process, lifeline)
        raise
    if ready is None or REFUSED_MARK in ready:
        code = process.wait()
        if lifeline is not None:
            lifeline.release()
        if ready is not None:
            raise ConfigError([Problem(*p) for p in json.loads(ready.split(" ", 1)[1])["problems"]])
        raise PlatformPluginError(f"the background job's launcher ended before the job started "
                                  f"(exit {code}): its output is above")
    found = json.loads(ready.split(" ", 1)[1])
    job = BackgroundJob(found["job_id"], found["job_dir"], how=how, process=process,
                        check=options.check)
    threading.Thread(target=_reap, args=(process, lifeline), daemon=True,
                     name=f"platform-job-{job.job_id}").start()
    return job


def _until_ready(stdout: IO[bytes], say: Callable[[str], object]) -> str | None:
    """The launcher's lines until its READY or REFUSED line (returned), None at EOF."""
    try:
        for raw in stdout:
            line = raw.decode("utf-8", errors="replace")
            if line.startswith((READY_MARK, REFUSED_MARK)):
                return line.strip()
            say(line)
        return None
    finally:
        stdout.close()


def _abandon(process: subprocess.Popen, lifeline: Lifeline | None) -> None:
    try:
        process.send_signal(signal.SIGINT)
        process.wait(30)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()
    if lifeline is not None:
        lifeline.release()


def _reap(process: subprocess.Popen, lifeline: Lifeline | None) -> None:
    """The job's launcher ended: collect its exit, end the lifeline cleanly."""
    process.wait()
    if lifeline is not None:
        lifeline.release()
