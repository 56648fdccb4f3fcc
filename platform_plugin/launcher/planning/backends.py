"""Backends: how ranks find each other. A registry, so a new backend is one class and one line
(the framework backends are in launcher/planning/framework_backends.py).

Each backend answers three questions from the settings and options it is given (it starts
nothing; `choose()` for `auto` reads the program's source: auto_backend.py):
- `layout`: which global ranks (and physical devices) run on this server,
- `rank_env`: the variables that make one worker a member of the job,
- `helpers`: extra processes that are not ranks (the ms-cluster scheduler).
The variables common to every backend (RANK_ID, DEVICE_ID, ...) are added by plan.py.
"""
from __future__ import annotations

import os
import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.options import BACKEND_CHOICES, LaunchOptions
from platform_plugin.util.record import FrozenRecord

if TYPE_CHECKING:  # annotations only: plan.py imports settings at run time
    from typing import Callable

    from platform_plugin.settings import Settings

class Layout(FrozenRecord):
    """Who runs where. `ranks` lists (global rank, device id) for this server, in local order."""

    world_size: int
    node_rank: int
    nnodes: int
    server_id: str
    ranks: tuple[tuple[int, int], ...]
    master_addr: str
    master_port: int | None
    rank_table_file: str | None
    __slots__ = tuple(__annotations__)  # the fields, in order

    def __init__(self, world_size: int, node_rank: int, nnodes: int, server_id: str,
                 ranks: tuple[tuple[int, int], ...], master_addr: str, master_port: int | None,
                 rank_table_file: str | None = None) -> None:
        self._init(world_size, node_rank, nnodes, server_id, ranks, master_addr, master_port,
                   rank_table_file)


class Helper(FrozenRecord):
    """A process of the job that is not a rank (the ms-cluster scheduler, the torch store).
    `name`: "sched" | "store"; `role`: RankSpec.role; `argv_of`: the job's command -> this
    helper's argv (None: the command itself, as the ms-cluster scheduler)."""

    name: str
    role: str
    env: dict
    argv_of: Callable[[tuple], tuple] | None
    __slots__ = tuple(__annotations__)  # the fields, in order

    def __init__(self, name: str, role: str, env: dict,
                 argv_of: Callable[[tuple], tuple] | None = None) -> None:
        self._init(name, role, env, argv_of)


def fail(code: str, message: str, path: str = "") -> ConfigError:
    """The refusal of a bad launch request: raise fail(CODE, what to do, where)."""
    return ConfigError([Problem(code, message, path)])


# --nproc when none is given and no rank table says it: 2 ranks on a machine without NPUs (a
# CPU box runs the README's commands as written, and 2 is the smallest job that is distributed),
# never more than its cores.
CPU_DEFAULT_NPROC = 2


def default_nproc(host) -> tuple[int, str]:
    """(processes, why) when --nproc is not given: the visible NPUs, else CPU_DEFAULT_NPROC."""
    if host.npu_present:
        devices = sorted(int(n[len("davinci"):]) for n in _listdir("/dev")
                         if re.fullmatch(r"davinci\d+", n))
        visible = (host.base_env or {}).get("ASCEND_RT_VISIBLE_DEVICES", "")
        if visible.strip():
            devices = [d for d in devices if str(d) in {v.strip() for v in visible.split(",")}]
        if devices:
            return len(devices), f"{len(devices)} visible NPU(s)"
    count = max(1, min(CPU_DEFAULT_NPROC, os.cpu_count() or 1))
    return count, f"no NPUs: default {count} (set --nproc N)"


def grid_layout(settings: Settings, options: LaunchOptions) -> Layout:
    """nnodes x nproc ranks, devices numbered by local rank (CPU, GPU, or NPUs without a table).
    build_plan has replaced a missing --nproc by `default_nproc`."""
    nproc = options.nproc
    if not nproc or nproc < 1:
        raise fail("LAUNCH_NPROC", f"--nproc {nproc}: start at least 1 process (leave --nproc "
                   "out for the default: the rank table's devices, else the visible NPUs, else "
                   f"{CPU_DEFAULT_NPROC})", "--nproc")
    nnodes, node_rank = options.nnodes, options.node_rank
    if not 0 <= node_rank < nnodes:
        raise fail("LAUNCH_NODE_RANK", f"--node-rank {node_rank} must be between 0 and "
                   f"--nnodes - 1 = {nnodes - 1}", "--node-rank")
    if nnodes > 1:
        _check_multi_node_port(options.master_port)
    first = node_rank * nproc
    return Layout(world_size=nnodes * nproc, node_rank=node_rank, nnodes=nnodes,
                  server_id=(settings.server.server_id if settings.server
                             else grid_server_id(nnodes, node_rank)),
                  ranks=tuple((first + i, i) for i in range(nproc)),
                  master_addr=options.master_addr, master_port=options.master_port)


def _check_multi_node_port(port: int | None) -> None:
    """Every backend, plain too: the launchers' job link on --master-port + 1 is what makes the
    servers one job. Without a port each server ran its ranks alone and could "succeed" while
    another server's ranks crashed; with 65535 node 0 crashed binding port 65536."""
    if not port:
        raise fail("LAUNCH_MASTER_PORT", "a multi-node job needs the same --master-port on every "
                   "server (and --master-addr = the address of node 0): the launchers meet on "
                   "--master-port + 1 to be one job", "--master-port")
    if port >= 65535:
        raise fail("LAUNCH_MASTER_PORT", f"--master-port {port}: a multi-node job also uses "
                   "--master-port + 1 (the launchers' control port), so at most 65534",
                   "--master-port")


def grid_server_id(nnodes: int, node_rank: int) -> str:
    """Without a rank table: `localhost` for one server, `node<I>` for node I of --nnodes (so
    the servers of one job, simulated on one machine too, never share an id)."""
    return "localhost" if nnodes == 1 else f"node{node_rank}"


class Backend:
    name = ""
    needs_port = False

    def layout(self, settings: Settings, options: LaunchOptions) -> Layout:
        return grid_layout(settings, options)

    def rank_env(self, layout: Layout, local_rank: int) -> dict[str, str]:
        return {}

    def helpers(self, layout: Layout) -> list[Helper]:
        return []


class PlainBackend(Backend):
    """Only the rank variables: any program that reads RANK_ID / RANK_SIZE itself."""

    name = "plain"


# The backends' names, as --backend lists them. `plain` is defined here; the framework backends
# (ms-cluster, torch, rank-table) in launcher/planning/framework_backends.py, loaded by the jobs that
# use one (a plain launch starts without compiling them).
BACKENDS = ("rank-table", "ms-cluster", "torch", "plain")


def backend(name: str) -> Backend:
    """The backend called `name` (one of BACKENDS)."""
    if name == "plain":
        return PlainBackend()
    from platform_plugin.launcher.planning.framework_backends import FRAMEWORK_BACKENDS
    return FRAMEWORK_BACKENDS[name]

def choose(requested: str, command: list[str], settings: Settings,
           npu_present: bool) -> tuple[str, str]:
    """(backend name, the reason printed to the user)."""
    if requested != "auto":
        if requested not in BACKENDS:
            raise fail("LAUNCH_BACKEND", f"unknown backend {requested!r}; choose one of "
                       f"{', '.join(BACKEND_CHOICES)}", "--backend")
        return requested, "requested"
    table = settings.rank_table
    if npu_present and table is not None:
        return "rank-table", f"Ascend NPUs present and rank table {table.path or ''} resolved"
    from platform_plugin.launcher.planning.auto_backend import by_imports  # (a named backend: not needed)
    return by_imports(command)


def npus_present() -> bool:
    """A /dev/davinci<N> exists (string tests: a regex per /dev entry cost every launch ~1 ms)."""
    return any(n.startswith("davinci") and n[7:].isdigit() for n in _listdir("/dev"))


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
