"""(command, settings, options) -> LaunchPlan: every process's argv, env, cwd and log file.

Spawns nothing and writes nothing, so it is tested exhaustively. It is not a pure function of
its arguments, though: with backend `auto` it reads the program's source to see what it
imports; it binds a socket to pick a free port when the backend needs one and none was given;
it calls the clock and a random source for a new job id, and os.getcwd() when no cwd is given.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys
from typing import Optional, Tuple

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.planning.backends import (Backend, JobRun, Layout, Placement,
                                                        backend as backend_named, choose,
                                                        default_nproc)
from platform_plugin.launcher.planning.threads import thread_default
from platform_plugin.launcher.options import LaunchOptions, with_environment
from platform_plugin.settings import Settings
from platform_plugin.util.devices import usable_cores
from platform_plugin.util.jobdirs import job_log_dir, log_name
from platform_plugin.util.ports import free_port
from platform_plugin.tracking.rank.job_id import new_job_id
from platform_plugin.variables import (PLATFORM_ATTEMPT_NUMBER, PLATFORM_CHECKPOINT_DIR,
                                       PLATFORM_JOB_DIR, PLATFORM_JOB_NAME, PLATFORM_RESUME_STEP,
                                       PLATFORM_SERVER_ID)


@dataclasses.dataclass(frozen=True)
class Host:
    """What launch() found on this machine; tests give it explicitly. `base_env`: the
    environment every rank inherits."""

    base_env: dict = dataclasses.field(default_factory=dict)
    npu_present: bool = False
    cores: int = dataclasses.field(default_factory=usable_cores)


@dataclasses.dataclass(frozen=True)
class RankSpec:
    """One process of the job: what to run, where, with which variables and log.
    `name`: "0".."N-1" (global rank) or "sched"; `role`: "worker" | "sched" | "service" (the
    torch store: stopped after the workers)."""

    name: str
    rank_id: Optional[int]
    local_rank: Optional[int]
    device_id: Optional[int]
    argv: Tuple[str, ...]
    env: dict
    cwd: str
    log_path: str
    role: str = "worker"
    fresh_cwd: bool = False  # --rank-dir: cwd is removed and made anew before it starts


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """Everything about a job before any process exists (build_plan makes it), with what the
    launcher decided while it runs: the job id (given, agreed or new), the port and the process
    count it chose, the attempt (`--max-restarts`) and the checkpoint step it resumes from
    (node 0's choice, None: from the beginning)."""

    job_id: str
    job_name: str
    job_dir: str
    backend: str
    backend_reason: str
    world_size: int
    node_rank: int
    nnodes: int
    ranks: Tuple[RankSpec, ...]
    command: Tuple[str, ...]
    server_id: str = "localhost"
    cache_dir: str = ""
    master_addr: str = "127.0.0.1"
    master_port: Optional[int] = None
    attempt: int = 1  # 1 for the first attempt, 2 for the first restart, ...
    checkpoint_dir: str = ""
    resume_step: Optional[int] = None
    notes: Tuple[str, ...] = ()  # what the launch line says the launcher chose for the ranks

    @property
    def workers(self) -> tuple[RankSpec, ...]:
        return tuple(r for r in self.ranks if r.role == "worker")

    @property
    def env_job_id(self) -> str:
        """The job's id as its processes carry it in JOB_ID (the reaper finds strays by it)."""
        return ascend_job_id(self.job_id)


# What Ascend's TF Adapter takes as JOB_ID (the CANN environment variable reference, "JOB_ID"
# under "TF Adapter"): letters, digits, '-' and '_', and not a number with a leading 0. A job
# name keeps the letters of any script (`训练.py`) and may hold a '.'; `--job-id` is any name.
ADAPTER_JOB_ID = re.compile(r"[A-Za-z0-9_-]+")


def ascend_job_id(job_id: str) -> str:
    """JOB_ID of the job's processes: the id itself when the TF Adapter takes it, else the id
    with every run of other characters as `_`, and 8 hex of its hash so two ids never share
    one. Derived from the id alone, so the same on every server of a job."""
    if ADAPTER_JOB_ID.fullmatch(job_id) and not (job_id.isdigit() and job_id.startswith("0")):
        return job_id
    import hashlib  # (OpenSSL's start: only for an id the Adapter would refuse)
    spelled = re.sub(r"[^A-Za-z0-9_-]+", "_", job_id)
    return f"{spelled}-{hashlib.sha256(job_id.encode()).hexdigest()[:8]}"


def normalize_command(command: list[str] | str) -> tuple[str, ...]:
    """A bare `python`/`python3` (or a script path) runs with this interpreter, as torchrun
    does: in a notebook, PATH's python is often not the kernel's."""
    if isinstance(command, str):
        command = shlex.split(command)
    command = [str(c) for c in command]
    if not command:
        raise ConfigError([Problem("LAUNCH_NO_COMMAND", "give the command to run, e.g. "
                                   "`platform-run launch --nproc 2 -- python train.py`", "command")])
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    elif command[0].endswith(".py"):
        command.insert(0, sys.executable)
    return tuple(command)


def default_job_name(command: tuple[str, ...]) -> str:
    args = list(command[1:]) if os.path.basename(command[0]).startswith("python") else list(command)
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            return _safe(args[i + 1].rsplit(".", 1)[-1])
        if arg == "-c":
            return "python-c"
        if not arg.startswith("-"):
            return _safe(os.path.splitext(os.path.basename(arg))[0])
    return _safe(os.path.basename(command[0]))


def _safe(name: str) -> str:
    """Letters and digits of any script (`--job-name 中文训练`, `训练.py` keep their name), `_.-`;
    the rest (spaces, slashes, quotes, shell and control characters) becomes `-`."""
    return re.sub(r"[^\w.-]+", "-", name).strip("-.") or "job"


@dataclasses.dataclass(frozen=True)
class JobPlace:
    """Where this server stands in its job, known before any plan (no port picked, no id made):
    what opens the job link. `first_server`: the rank table's first server (an address), which
    hosts the link on the rank-table route; "" elsewhere."""

    job_name: str
    backend: str
    backend_reason: str  # why that backend (said on the job's first line)
    nnodes: int
    node_rank: int
    server_id: str
    master_addr: str
    master_port: Optional[int]
    command: Tuple[str, ...]
    cwd: str
    log_root: str  # the folder the job's folder goes in
    cache_root: str
    checkpoint_dir: str = ""  # --checkpoint-dir, absolute ("": the job folder's own)
    first_server: str = ""
    rank_table_file: str = ""


def job_place(command: list[str] | str, settings: Settings, options: LaunchOptions,
              host: Host | None = None) -> JobPlace:
    """This server's place in the job from the options and the settings alone: what every
    attempt's plan shares (build_plan reads it, never works it out again)."""
    argv = normalize_command(command)
    host = host or Host()
    options = with_environment(options, dict(host.base_env))
    name, reason = choose(options.backend, list(argv), settings, host.npu_present)
    layout = _layout(name, settings, options, host, options.master_port)
    table = settings.rank_table if name == "rank-table" else None
    cwd = os.path.abspath(options.cwd or os.getcwd())
    log_root, cache_root = _roots(options, dict(host.base_env), cwd)
    return JobPlace(job_name=_job_name(argv, options), backend=name, backend_reason=reason,
                    nnodes=layout.nnodes,
                    node_rank=layout.node_rank, server_id=layout.server_id,
                    master_addr=layout.master_addr, master_port=layout.master_port,
                    command=argv, cwd=cwd, log_root=log_root, cache_root=cache_root,
                    checkpoint_dir=_checkpoint_root(options, cwd),
                    first_server=table.servers[0].server_id if table else "",
                    rank_table_file=str(layout.rank_table_file or ""))


def _roots(options: LaunchOptions, base_env: dict, cwd: str) -> tuple[str, str]:
    """(the folder job folders go in, the folder job caches go in)."""
    cache_root = (options.cache_dir
                  or os.path.join(os.path.expanduser("~"), ".cache", "platform_plugin"))
    return job_log_dir(options.log_dir, environ=base_env, cwd=cwd), os.path.abspath(cache_root)


CHECKPOINTS = "checkpoints"  # the job folder's own checkpoint folder (no --checkpoint-dir)


def checkpoint_folder(place: JobPlace, job_id: str) -> str:
    """The checkpoint folder of job `job_id` here (the plan's PLATFORM_CHECKPOINT_DIR)."""
    return place.checkpoint_dir or os.path.join(place.log_root, job_id, CHECKPOINTS)


def _checkpoint_root(options: LaunchOptions, cwd: str) -> str:
    """--checkpoint-dir (else PLATFORM_CHECKPOINT_DIR, applied by with_environment), absolute
    against the ranks' folder; "" when neither is given."""
    if not options.checkpoint_dir:
        return ""
    return os.path.abspath(os.path.join(cwd, os.path.expanduser(options.checkpoint_dir)))


def _job_name(argv: tuple[str, ...], options: LaunchOptions) -> str:
    return _safe(options.job_name) if options.job_name else default_job_name(argv)


def _layout(name: str, settings: Settings, options: LaunchOptions, host: Host,
            port: int | None) -> Layout:
    """Who runs where, with backend `name`."""
    nproc = options.nproc
    if nproc is None and name != "rank-table":
        nproc = default_nproc(host)[0]
    return backend_named(name).layout(settings, Placement(nproc, options.nnodes, options.node_rank,
                                                          options.master_addr, port))


def build_plan(place: JobPlace, settings: Settings, options: LaunchOptions,
               host: Host | None = None, *, job_id: str | None = None,
               master_port: int | None = None, attempt: int = 1,
               resume_step: int | None = None) -> LaunchPlan:
    """An attempt's plan at this server's `place` (`job_place` of the same settings, options
    and host: the command, backend, job name and folders come from it). `job_id`: the id
    agreed with the other servers (default: the option, else a new one); `master_port`: the
    port of a restarted attempt (default: the option, else a free one when the backend needs
    one); `attempt`: 1 for the first, 2 for the first restart; `resume_step`: the checkpoint
    node 0 chose for this attempt (None: nothing to resume)."""
    argv, name, job_name, cwd = place.command, place.backend, place.job_name, place.cwd
    host = host or Host()
    base_env = dict(host.base_env)
    options = with_environment(options, base_env)
    backend = backend_named(name)
    port = master_port if master_port is not None else options.master_port
    if backend.needs_port and port is None and options.nnodes == 1:
        port = free_port("0.0.0.0")
    layout = _layout(name, settings, options, host, port)
    job_id = job_id or options.job_id or new_job_id(job_name)
    job_dir = os.path.join(place.log_root, job_id)
    cache_dir = os.path.join(place.cache_root, job_id)
    checkpoint_dir = checkpoint_folder(place, job_id)
    base_env.pop(PLATFORM_RESUME_STEP.name, None)  # the launcher's word alone (resume_step)
    if options.buffered:  # the ranks keep their own buffering, even if the caller's env had none
        base_env = {k: v for k, v in base_env.items() if k != "PYTHONUNBUFFERED"}
    common = {"RANK_SIZE": str(layout.world_size), "JOB_ID": ascend_job_id(job_id),
              PLATFORM_JOB_NAME.name: job_name, PLATFORM_JOB_DIR.name: job_dir,
              PLATFORM_SERVER_ID.name: layout.server_id,
              # live output: a print reaches the display at once (costs a write per print)
              **({} if options.buffered else {"PYTHONUNBUFFERED": "1"}),
              PLATFORM_ATTEMPT_NUMBER.name: str(attempt), PLATFORM_CHECKPOINT_DIR.name: checkpoint_dir,
              **({} if resume_step is None else {PLATFORM_RESUME_STEP.name: str(resume_step)}),
              # compile caches and Ascend process logs go to the job's cache, not into CODE/
              "MS_COMPILER_CACHE_PATH": os.path.join(cache_dir, "compiler_cache")}
    if layout.ranks:  # this server's first rank, on every route (node >= 1 of --nnodes too)
        common["RANK_START"] = str(layout.ranks[0][0])
    run = JobRun(job_id=job_id, attempt=attempt, max_restarts=options.max_restarts,
                 cluster_timeout=options.cluster_timeout, job_dir=job_dir)
    base_env, notes = _with_defaults(backend, layout, run, base_env, host.cores)
    shared = RankBase(argv, {**base_env, **common}, options.env, cwd, job_dir, cache_dir, run)
    ranks = [in_rank_dir(_worker(layout, backend, i, shared), options.rank_dir)
             for i in range(len(layout.ranks))]
    helpers = [RankSpec(name=h.name, rank_id=None, local_rank=None, device_id=None,
                        argv=h.argv_of(argv) if h.argv_of else argv,
                        env={**base_env, **common, **h.env,
                             "ASCEND_PROCESS_LOG_PATH": os.path.join(cache_dir, "ascend_log", h.name),
                             **options.env},
                        cwd=cwd, log_path=os.path.join(job_dir, log_name(h.name)), role=h.role)
               for h in backend.helpers(layout)]
    return LaunchPlan(job_id=job_id, job_name=job_name, job_dir=job_dir, backend=name,
                      backend_reason=place.backend_reason, world_size=layout.world_size,
                      node_rank=layout.node_rank, nnodes=layout.nnodes,
                      ranks=tuple(helpers + ranks), command=argv, server_id=layout.server_id,
                      cache_dir=cache_dir, master_addr=layout.master_addr,
                      master_port=layout.master_port, attempt=attempt,
                      checkpoint_dir=checkpoint_dir, resume_step=resume_step, notes=notes)


def _with_defaults(backend: Backend, layout: Layout, run: JobRun, base_env: dict,
                   cores: int) -> tuple[dict, tuple[str, ...]]:
    """The environment the ranks inherit: the launcher's defaults under the user's values
    (exported, .env), the variables of its flags over them; and what the launch line says."""
    threads, note = thread_default(len(layout.ranks), cores, base_env)
    return ({**backend.env_defaults(layout, run), **threads, **base_env,
             **backend.env_flags(layout, run)}, (note,) if note else ())


@dataclasses.dataclass(frozen=True)
class RankBase:
    """What every rank of a plan shares: the command, the environment under its own variables
    (`env`) and over them (`given`: the options' env wins), its folders."""

    argv: Tuple[str, ...]
    env: dict
    given: dict
    cwd: str
    job_dir: str
    cache_dir: str
    run: JobRun = JobRun()  # what the backend's variables say of the run


def _worker(layout: Layout, backend: Backend, local_rank: int, base: RankBase) -> RankSpec:
    rank_id, device_id = layout.ranks[local_rank]
    env = {**base.env, **backend.rank_env(layout, local_rank, base.run),
           "RANK_ID": str(rank_id), "DEVICE_ID": str(device_id), "LOCAL_RANK": str(local_rank),
           "ASCEND_PROCESS_LOG_PATH": os.path.join(base.cache_dir, "ascend_log", f"rank_{rank_id}"),
           **base.given}
    return RankSpec(name=str(rank_id), rank_id=rank_id, local_rank=local_rank,
                    device_id=device_id, argv=base.argv, env=env, cwd=base.cwd,
                    log_path=os.path.join(base.job_dir, log_name(str(rank_id))))


def in_rank_dir(spec: RankSpec, pattern: str | None) -> RankSpec:
    """--rank-dir: the rank in its own folder below its working folder (made anew before it
    starts: `fresh_cwd`), as the shell loop's `cd device_$i`, its command's paths still the
    user's (`anchored`). No pattern: the rank as it is."""
    if not pattern:
        return spec
    folder = os.path.normpath(pattern.format(rank_id=spec.rank_id, local_rank=spec.local_rank))
    return dataclasses.replace(spec, argv=anchored(spec.argv, spec.cwd), fresh_cwd=True,
                               cwd=os.path.join(spec.cwd, folder))


def anchored(command: tuple[str, ...], cwd: str) -> tuple[str, ...]:
    """The command of a rank that runs in a folder of its own (--rank-dir): every argument
    that names an existing file or folder relative to `cwd` (where the user launched), alone or
    as `--opt=PATH`, made absolute, so `train.py --data ./data` means what it meant there. A
    path that does not exist yet (an output) stays relative: it lands in the rank's folder,
    as in the shell loop's `cd device_$i`."""
    def absolute(arg: str) -> str:
        if arg and not os.path.isabs(arg) and not arg.startswith("-") \
                and os.path.exists(os.path.join(cwd, arg)):
            return os.path.normpath(os.path.join(cwd, arg))
        return arg
    out = [command[0]]
    for arg in command[1:]:
        name, equals, value = arg.partition("=")
        out.append(f"{name}={absolute(value)}" if equals and name.startswith("-")
                   else absolute(arg))
    return tuple(out)
