"""Refusals before anything of a job exists: no folder, no tracking run, no process.

Everything here reads the plan and the file system and raises ConfigError (exit 2, a code)
when the job could not start or could not keep its logs: the program, the folders, the size
of what the kernel must copy into each rank, a requested port, devices held by another job.
"""
from __future__ import annotations

import os
import shutil
from typing import Callable

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.planning.plan import CHECKPOINTS, JobPlace, LaunchPlan
from platform_plugin.launcher.planning.stale import refuse_or_kill
from platform_plugin.util.folders import check_own_folder, check_writable_folder
from platform_plugin.util.hosts import is_host
from platform_plugin.util.ports import check_free
from platform_plugin.variables import refused_values

MAX_JOB_NAME = 100  # the job folder is <name>-<date>-<time>-<hex>; file names end at 255 bytes
MAX_ARG_STRLEN = 128 * 1024  # Linux: one argument or NAME=VALUE, terminator included


def _refuse(code: str, message: str, path: str) -> ConfigError:
    return ConfigError([Problem(code, message, path)])


def check_place(place: JobPlace, env: dict) -> None:
    """What can be refused before this server's launcher meets the others' (the job's identity,
    hence its plan, comes from node 0). `env`: the ranks' environment as far as it is known
    (the PATH the program is looked up on)."""
    problems = refused_values(env)  # read later (at the rendezvous, at the end): refused now
    if problems:
        raise ConfigError(problems)
    _check_job(place.job_name, place.master_addr, place.log_root, place.cache_root,
               list(place.command), env, place.cwd)
    if place.checkpoint_dir:
        check_writable_folder(place.checkpoint_dir, "checkpoint", "LAUNCH_CHECKPOINT_DIR",
                              "--checkpoint-dir")
        check_own_folder(place.checkpoint_dir, "checkpoint", "LAUNCH_CHECKPOINT_DIR_NOT_OWN",
                         "--checkpoint-dir", link_allowed=True)


def check_plan(plan: LaunchPlan) -> None:
    """The checks that need no network and start nothing (also run by the fuzz corpus): those
    of `check_place` on the plan's own ranks, and the size of every rank's argv and env."""
    first = plan.workers[0] if plan.workers else None  # every rank runs one argv in one folder
    _check_job(plan.job_name, plan.master_addr, os.path.dirname(plan.job_dir),
               os.path.dirname(plan.cache_dir), list(first.argv) if first else None,
               first.env if first else {}, first.cwd if first else "")
    # an existing job or checkpoint folder (a --job-id given again, a folder planted under it)
    check_own_folder(plan.job_dir, "job", "LAUNCH_JOB_DIR_NOT_OWN", "--job-id", link_allowed=False)
    if plan.checkpoint_dir:
        check_own_folder(plan.checkpoint_dir, "checkpoint", "LAUNCH_CHECKPOINT_DIR_NOT_OWN",
                         "--checkpoint-dir",
                         link_allowed=plan.checkpoint_dir != os.path.join(plan.job_dir, CHECKPOINTS))
    sizes: dict = {}  # shared by the ranks: most of their variables are the same
    for spec in plan.ranks:
        check_exec_size(list(spec.argv), spec.env, sizes)


def _check_job(job_name: str, master_addr: str, log_root: str, cache_root: str,
               argv: list[str] | None, env: dict, cwd: str) -> None:
    size = len(job_name.encode("utf-8"))  # a folder name holds 255 bytes, not characters
    if size > MAX_JOB_NAME:
        raise _refuse("LAUNCH_JOB_NAME", f"the job name is {size} bytes in UTF-8 ({len(job_name)} "
                      f"characters); use at most {MAX_JOB_NAME} bytes (it names the job's folder)",
                      "--job-name")
    if not is_host(master_addr):
        raise _refuse("LAUNCH_MASTER_ADDR", f"--master-addr {master_addr[:80]!r} is neither an "
                      "IP address nor a host name", "--master-addr")
    check_writable_folder(log_root, "log", "LAUNCH_LOG_DIR", "--log-dir")
    check_writable_folder(cache_root, "cache", "LAUNCH_CACHE_DIR", "--cache-dir")
    if argv is not None:
        check_program(argv, env, cwd)


def resolve_program(program: str, env: dict, cwd: str) -> str | None:
    """The file the spawn will execute: a path with a slash is taken relative to the rank's
    folder, a bare name is searched on the rank's PATH (as execvpe does)."""
    if os.sep in program:
        return os.path.normpath(os.path.join(cwd, program))
    return shutil.which(program, path=env.get("PATH", os.defpath))


def check_program(argv: list[str], env: dict, cwd: str) -> None:
    program = argv[0] if argv else ""
    if not program.strip():
        raise _refuse("LAUNCH_PROGRAM_EMPTY", "the command is empty: give the program to run, "
                      "e.g. `-- python train.py`", "command")
    if "\0" in program:
        raise _refuse("LAUNCH_NUL", "the command holds a NUL byte", "command")
    path = resolve_program(program, env, cwd)
    if path is None or not os.path.exists(path):
        where = ("on the ranks' PATH" if os.sep not in program else
                 "" if os.path.isabs(program) else f"(looked in {cwd})")
        raise _refuse("LAUNCH_PROGRAM_MISSING", f"program {program!r} not found {where}".strip(),
                      "command")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise _refuse("LAUNCH_PROGRAM_NOT_EXECUTABLE", f"{path} is not an executable file "
                      f"(chmod +x it, or run it through its interpreter: python {program})",
                      "command")
    if os.path.getsize(path) == 0:
        raise _refuse("LAUNCH_PROGRAM_EMPTY", f"{path} is an empty file: nothing can run",
                      "command")
    _check_script(argv, cwd)


def _check_script(argv: list[str], cwd: str) -> None:
    """`python x.py`: the script must exist (else every rank fails the same way at once)."""
    if not os.path.basename(argv[0]).startswith("python"):
        return
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c", "-"):
        args = args[2:] if args[0] in ("-W", "-X") else args[1:]  # options with a value
    if not args or args[0] in ("-m", "-c", "-"):
        return
    script = os.path.join(cwd, args[0])
    if not os.path.isfile(script):
        raise _refuse("LAUNCH_SCRIPT_MISSING", f"script {args[0]!r} not found (looked in {cwd})",
                      "command")


def check_exec_size(argv: list[str], env: dict, sizes: dict | None = None) -> None:
    """What execve would refuse with E2BIG ('Argument list too long') or ValueError (NUL).
    `sizes` remembers each variable's checked size across calls (the ranks of a job)."""
    sizes = {} if sizes is None else sizes
    total = sum(_checked_size(text) + 8 for text in argv)  # + 8: the pointer to it
    for item in env.items():
        size = sizes.get(item)
        if size is None:
            size = sizes[item] = _checked_size(f"{item[0]}={item[1]}")
        total += size + 8
    limit = _arg_max()
    if total > limit:
        raise _refuse("LAUNCH_ARG_TOO_LONG", f"arguments and variables of a rank take {total} "
                      f"bytes; this system allows {limit}. Unset large variables.", "env")


def _checked_size(text: str) -> int:
    """The bytes execve copies for one argument or NAME=VALUE (refused: a NUL, or too long)."""
    if "\0" in text:
        name = text.split("=", 1)[0]
        raise _refuse("LAUNCH_NUL", f"{name[:60]!r} holds a NUL byte: no argument or "
                      "variable can carry one", name[:60])
    size = len(text.encode("utf-8", "surrogateescape")) + 1
    if size > MAX_ARG_STRLEN:
        name = text.split("=", 1)[0][:60]
        raise _refuse("LAUNCH_ARG_TOO_LONG", f"{name} is {size} bytes; Linux passes at most "
                      f"{MAX_ARG_STRLEN} per argument or variable ('Argument list too "
                      "long'). Put large data in a file.", name)
    return size


def _arg_max() -> int:
    try:
        return max(int(os.sysconf("SC_ARG_MAX")) - 4096, 64 * 1024)
    except (ValueError, OSError):
        return 2 * 1024 * 1024


def check_ports_and_devices(plan: LaunchPlan, options: LaunchOptions, npu_present: bool,
                            note: Callable[[str], None]) -> None:
    """A requested port in use, devices held by an earlier job (`--kill-stale` kills those)."""
    if options.master_port and plan.node_rank == 0 and plan.master_port:
        what = "MS_SCHED_PORT" if plan.backend == "ms-cluster" else "MASTER_PORT"
        if plan.backend in ("ms-cluster", "torch"):
            check_free(plan.master_port, "0.0.0.0", what=what)
    if plan.backend == "rank-table" or npu_present:
        devices = {r.device_id for r in plan.workers if r.device_id is not None}
        killed = refuse_or_kill(devices, plan.server_id, kill=options.kill_stale)
        if killed:
            note(f"--kill-stale: killed {len(killed)} stale rank(s): "
                 f"{', '.join(str(s.pid) for s in killed)}")
