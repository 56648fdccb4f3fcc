"""Backends: how ranks find each other (plain, MindSpore's dynamic cluster, torch.distributed,
the HCCL rank table). A registry, so a new backend is one class and one line.

Each backend answers three questions from the settings and the placement it is given (it starts
nothing; `choose()` for `auto` reads the program's source: auto_backend.py):
- `layout`: which global ranks (and physical devices) run on this server,
- `rank_env`: the variables that make one worker a member of the job,
- `helpers`: extra processes that are not ranks (the ms-cluster scheduler).
The variables common to every backend (RANK_ID, DEVICE_ID, ...) are added by plan.py.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional, Protocol, Tuple

from platform_plugin import ranktable
from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.planning import torch_store
from platform_plugin.launcher.planning.auto_backend import by_imports
from platform_plugin.settings import Settings
from platform_plugin.util.devices import visible_npus
from platform_plugin.util.jobdirs import error_file_name

# Dynamic-cluster timeouts (seconds). MindSpore's defaults (topology 30 min, node 300 s) turn a
# rank that never started into a half-hour wait; the launcher watches the processes anyway.
# Defaults only: the user's exported values, the .env file and --cluster-timeout win.
MS_TOPO_TIMEOUT_S = 120
MS_NODE_TIMEOUT_S = 60
MS_HEARTBEAT_RETRY_TIMEOUT_S = 30


@dataclasses.dataclass(frozen=True)
class Placement:
    """What the layout is asked for: the options of the job, with the process count and the
    port the plan chose when none was given (`nproc` None: the rank table decides)."""

    nproc: Optional[int]
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Layout:
    """Who runs where. `ranks` lists (global rank, device id) for this server, in local order."""

    world_size: int
    node_rank: int
    nnodes: int
    server_id: str
    ranks: Tuple[Tuple[int, int], ...]
    master_addr: str
    master_port: Optional[int]
    rank_table_file: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class JobRun:
    """What a backend's variables say about the run beyond its layout: the job's id, this
    attempt (1 first), the restarts allowed, and --cluster-timeout (None: not given)."""

    job_id: str = ""
    attempt: int = 1
    max_restarts: int = 0
    cluster_timeout: Optional[int] = None
    job_dir: str = ""


@dataclasses.dataclass(frozen=True)
class Helper:
    """A process of the job that is not a rank (the ms-cluster scheduler, the torch store).
    `name`: "sched" | "store"; `role`: RankSpec.role; `argv_of`: the job's command -> this
    helper's argv (None: the command itself, as the ms-cluster scheduler)."""

    name: str
    role: str
    env: dict
    argv_of: Optional[Callable[[tuple], tuple]] = None


def fail(code: str, message: str, path: str = "") -> ConfigError:
    """The refusal of a bad launch request: raise fail(CODE, what to do, where)."""
    return ConfigError([Problem(code, message, path)])


# --nproc when none is given and no rank table says it: 2 ranks on a machine without NPUs (a
# CPU box runs the README's commands as written, and 2 is the smallest job that is distributed),
# never more than its cores.
CPU_DEFAULT_NPROC = 2


class HostDevices(Protocol):
    """What default_nproc reads of the machine (plan.Host; plan.py imports this module)."""

    @property
    def npu_present(self) -> bool: ...

    @property
    def base_env(self) -> dict: ...


def default_nproc(host: HostDevices) -> tuple[int, str]:
    """(processes, why) when --nproc is not given: the visible NPUs, else CPU_DEFAULT_NPROC."""
    if host.npu_present:
        devices = visible_npus(host.base_env or {})
        if devices:
            return len(devices), f"{len(devices)} visible NPU(s)"
    count = max(1, min(CPU_DEFAULT_NPROC, os.cpu_count() or 1))
    return count, f"no NPUs: default {count} (set --nproc N)"


def grid_layout(settings: Settings, placement: Placement) -> Layout:
    """nnodes x nproc ranks, devices numbered by local rank (CPU, GPU, or NPUs without a table).
    build_plan has replaced a missing --nproc by `default_nproc`."""
    nproc = placement.nproc
    if not nproc or nproc < 1:
        raise fail("LAUNCH_NPROC", f"--nproc {nproc}: start at least 1 process (leave --nproc "
                   "out for the default: the rank table's devices, else the visible NPUs, else "
                   f"{CPU_DEFAULT_NPROC})", "--nproc")
    nnodes, node_rank = placement.nnodes, placement.node_rank
    if not 0 <= node_rank < nnodes:
        raise fail("LAUNCH_NODE_RANK", f"--node-rank {node_rank} must be between 0 and "
                   f"--nnodes - 1 = {nnodes - 1}", "--node-rank")
    if nnodes > 1:
        _check_multi_node_port(placement.master_port)
    first = node_rank * nproc
    return Layout(world_size=nnodes * nproc, node_rank=node_rank, nnodes=nnodes,
                  server_id=(settings.server.server_id if settings.server
                             else grid_server_id(nnodes, node_rank)),
                  ranks=tuple((first + i, i) for i in range(nproc)),
                  master_addr=placement.master_addr, master_port=placement.master_port)


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

    def layout(self, settings: Settings, placement: Placement) -> Layout:
        return grid_layout(settings, placement)

    def rank_env(self, layout: Layout, local_rank: int, run: JobRun) -> dict[str, str]:
        return {}

    def env_defaults(self, layout: Layout, run: JobRun) -> dict[str, str]:
        """Variables of every process of the job that the user's own values (exported, .env)
        override: the launcher's choice where the user made none."""
        return {}

    def env_flags(self, layout: Layout, run: JobRun) -> dict[str, str]:
        """Variables a launch option sets for every process of the job: they win over the
        user's environment (a flag is the more specific word; `launch(env=)` still wins)."""
        return {}

    def helpers(self, layout: Layout) -> list[Helper]:
        return []


class PlainBackend(Backend):
    """Only the rank variables: any program that reads RANK_ID / RANK_SIZE itself."""

    name = "plain"


TORCHRUN_ROLE = "default"  # torchrun's --role default: ROLE_NAME


class TorchBackend(Backend):
    """torch.distributed env:// rendezvous, the variables torchrun sets."""

    name = "torch"
    needs_port = True

    def rank_env(self, layout: Layout, local_rank: int, run: JobRun) -> dict[str, str]:
        """torchrun's worker variables (torch/distributed/elastic/agent/server/
        local_elastic_agent.py, `_start_workers`), with its one role, "default": a role's ranks
        and world are the job's; a group is a server."""
        rank, _ = layout.ranks[local_rank]
        return {"RANK": str(rank), "LOCAL_RANK": str(local_rank),
                "WORLD_SIZE": str(layout.world_size), "LOCAL_WORLD_SIZE": str(len(layout.ranks)),
                "GROUP_RANK": str(layout.node_rank), "GROUP_WORLD_SIZE": str(layout.nnodes),
                "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(layout.world_size),
                "ROLE_NAME": TORCHRUN_ROLE, "MASTER_ADDR": layout.master_addr,
                "MASTER_PORT": str(layout.master_port), **torch_store.AGENT_STORE,
                "TORCHELASTIC_RESTART_COUNT": str(run.attempt - 1),  # torchrun's: 0 first
                "TORCHELASTIC_MAX_RESTARTS": str(run.max_restarts),
                "TORCHELASTIC_RUN_ID": run.job_id,
                # where torch's @record writes a failing rank's exception (the root cause shows it)
                "TORCHELASTIC_ERROR_FILE": os.path.join(run.job_dir,
                                                        error_file_name(str(rank), run.attempt)),
                # gloo's own listening sockets: on loopback for a single-server job
                **({"GLOO_SOCKET_IFNAME": "lo"} if layout.nnodes == 1 else {})}

    def env_defaults(self, layout: Layout, run: JobRun) -> dict[str, str]:
        return {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}  # torchrun's, unless the user set it

    def helpers(self, layout: Layout) -> list[Helper]:
        """Node 0 hosts the rendezvous store on MASTER_ADDR only (torch_store.py says why)."""
        if layout.node_rank != 0:
            return []
        env = {"MASTER_ADDR": layout.master_addr, "MASTER_PORT": str(layout.master_port)}
        return [Helper(torch_store.NAME, torch_store.ROLE, env, argv_of=torch_store.argv)]


class MsClusterBackend(Backend):
    """MindSpore dynamic cluster (CPU/GPU, or Ascend without a table): one scheduler, N workers.

    MS_ENABLE_RECOVERY is never set: with it the scheduler waits for lost workers forever."""

    name = "ms-cluster"
    needs_port = True

    def _cluster_env(self, layout: Layout) -> dict[str, str]:
        return {"MS_SCHED_HOST": layout.master_addr, "MS_SCHED_PORT": str(layout.master_port),
                "MS_WORKER_NUM": str(layout.world_size)}

    def env_defaults(self, layout: Layout, run: JobRun) -> dict[str, str]:
        return {"MS_TOPO_TIMEOUT": str(MS_TOPO_TIMEOUT_S), "MS_NODE_TIMEOUT": str(MS_NODE_TIMEOUT_S),
                "MS_HEARTBEAT_RETRY_TIMEOUT": str(MS_HEARTBEAT_RETRY_TIMEOUT_S)}

    def env_flags(self, layout: Layout, run: JobRun) -> dict[str, str]:
        """--cluster-timeout S is msrun's --cluster_time_out: MS_TOPO_TIMEOUT."""
        if run.cluster_timeout is None:
            return {}
        return {"MS_TOPO_TIMEOUT": str(run.cluster_timeout)}

    def rank_env(self, layout: Layout, local_rank: int, run: JobRun) -> dict[str, str]:
        rank, _ = layout.ranks[local_rank]
        return {**self._cluster_env(layout), "MS_ROLE": "MS_WORKER", "MS_NODE_ID": str(rank)}

    def helpers(self, layout: Layout) -> list[Helper]:
        if layout.node_rank != 0:  # one scheduler per job, on node 0
            return []
        return [Helper("sched", "sched", {**self._cluster_env(layout), "MS_ROLE": "MS_SCHED"})]


class RankTableBackend(Backend):
    """Ascend with an HCCL rank table (MindSpore, and TensorFlow through the TF Adapter): this
    server's devices, DEVICE_ID = the runtime id of the physical device (davincirunsdk wrongly
    uses the list index)."""

    name = "rank-table"

    def layout(self, settings: Settings, placement: Placement) -> Layout:
        table = settings.rank_table
        if table is None:
            raise fail("LAUNCH_NO_RANK_TABLE", "the rank-table backend needs a rank table: pass "
                       "--rank-table FILE or set RANK_TABLE_FILE", "RANK_TABLE_FILE")
        server = settings.server
        if server is None:
            server = ranktable.select_server(table, rank_start=settings.rank_start)
        devices = sorted(server.devices, key=lambda d: d.rank_id)
        if placement.nproc and placement.nproc != len(devices):
            raise fail("LAUNCH_NPROC_TABLE", f"the rank table gives server {server.server_id} "
                       f"{len(devices)} devices but --nproc is {placement.nproc}: leave --nproc out "
                       "or use a table with the devices you want", "--nproc")
        node_rank = [s.server_id for s in table.servers].index(server.server_id)
        # DEVICE_ID is what the runtime calls the card: the physical id, renumbered from 0
        # when ASCEND_RT_VISIBLE_DEVICES hides some cards (a card outside it is an error).
        visible = settings.visible_devices
        return Layout(world_size=table.rank_size, node_rank=node_rank, nnodes=len(table.servers),
                      server_id=server.server_id,
                      ranks=tuple((d.rank_id, ranktable.runtime_device_id(d.device_id, visible))
                                  for d in devices),
                      master_addr=placement.master_addr, master_port=None,
                      rank_table_file=table.path or settings.rank_table_file)

    def rank_env(self, layout: Layout, local_rank: int, run: JobRun) -> dict[str, str]:
        """HCCL's and MindSpore's variables (plan.py adds RANK_ID, RANK_SIZE, DEVICE_ID, JOB_ID),
        and ASCEND_DEVICE_ID, the card as Ascend's TF Adapter reads it: the same runtime id."""
        _, device = layout.ranks[local_rank]
        return {"RANK_TABLE_FILE": str(layout.rank_table_file or ""),
                "RANK_START": str(layout.ranks[0][0]), "ASCEND_DEVICE_ID": str(device)}


# The backends by name, as --backend lists them after `auto` (options.BACKEND_CHOICES).
REGISTRY: dict[str, Backend] = {b.name: b for b in (
    RankTableBackend(), MsClusterBackend(), TorchBackend(), PlainBackend())}
BACKENDS = tuple(REGISTRY)


def backend(name: str) -> Backend:
    """The backend called `name` (one of BACKENDS)."""
    return REGISTRY[name]


def choose(requested: str, command: list[str], settings: Settings,
           npu_present: bool) -> tuple[str, str]:
    """(backend name, the reason printed to the user)."""
    if requested != "auto":
        if requested not in BACKENDS:
            raise fail("LAUNCH_BACKEND", f"unknown backend {requested!r}; choose one of "
                       f"{', '.join(('auto',) + BACKENDS)}", "--backend")
        return requested, "requested"
    table = settings.rank_table
    if npu_present and table is not None:
        return "rank-table", f"Ascend NPUs present and rank table {table.path or ''} resolved"
    return by_imports(command)


def npus_present() -> bool:
    """A /dev/davinci<N> exists (string tests: every launch asks, a regex per /dev entry is slow)."""
    return any(n.startswith("davinci") and n[7:].isdigit() for n in _listdir("/dev"))


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
