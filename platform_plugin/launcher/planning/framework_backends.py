"""The framework backends: MindSpore's dynamic cluster, torch.distributed, and the HCCL rank
table (launcher/planning/backends.py has the registry, the base class and `plain`). Loaded only by a
job that uses one of them: a plain launch starts without compiling them, and `ranktable` and
`torch_store` are imported by the backend that needs them, when it needs them.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)

from platform_plugin.launcher.planning.backends import Backend, Helper, Layout, fail

if TYPE_CHECKING:  # pragma: no cover
    from platform_plugin.launcher.options import LaunchOptions
    from platform_plugin.settings import Settings

# Dynamic-cluster timeouts (seconds). MindSpore's defaults (topology 30 min, node 300 s) turn a
# rank that never started into a half-hour wait; the launcher watches the processes anyway.
MS_TOPO_TIMEOUT_S = 120
MS_NODE_TIMEOUT_S = 60
MS_HEARTBEAT_RETRY_TIMEOUT_S = 30


class TorchBackend(Backend):
    """torch.distributed env:// rendezvous, the variables torchrun sets."""

    name = "torch"
    needs_port = True

    def rank_env(self, layout: Layout, local_rank: int) -> dict[str, str]:
        from platform_plugin.launcher.planning import torch_store
        rank, _ = layout.ranks[local_rank]
        return {"RANK": str(rank), "LOCAL_RANK": str(local_rank),
                "WORLD_SIZE": str(layout.world_size), "LOCAL_WORLD_SIZE": str(len(layout.ranks)),
                "GROUP_RANK": str(layout.node_rank), "MASTER_ADDR": layout.master_addr,
                "MASTER_PORT": str(layout.master_port), **torch_store.AGENT_STORE,
                # gloo's own listening sockets: on loopback for a single-server job
                **({"GLOO_SOCKET_IFNAME": "lo"} if layout.nnodes == 1 else {})}

    def helpers(self, layout: Layout) -> list[Helper]:
        """Node 0 hosts the rendezvous store on MASTER_ADDR only (torch_store.py says why)."""
        if layout.node_rank != 0:
            return []
        from platform_plugin.launcher.planning import torch_store
        env = {"MASTER_ADDR": layout.master_addr, "MASTER_PORT": str(layout.master_port)}
        return [Helper(torch_store.NAME, torch_store.ROLE, env, argv_of=torch_store.argv)]


class MsClusterBackend(Backend):
    """MindSpore dynamic cluster (CPU/GPU, or Ascend without a table): one scheduler, N workers.

    MS_ENABLE_RECOVERY is never set: with it the scheduler waits for lost workers forever."""

    name = "ms-cluster"
    needs_port = True

    def _cluster_env(self, layout: Layout) -> dict[str, str]:
        return {"MS_SCHED_HOST": layout.master_addr, "MS_SCHED_PORT": str(layout.master_port),
                "MS_WORKER_NUM": str(layout.world_size), "MS_TOPO_TIMEOUT": str(MS_TOPO_TIMEOUT_S),
                "MS_NODE_TIMEOUT": str(MS_NODE_TIMEOUT_S),
                "MS_HEARTBEAT_RETRY_TIMEOUT": str(MS_HEARTBEAT_RETRY_TIMEOUT_S)}

    def rank_env(self, layout: Layout, local_rank: int) -> dict[str, str]:
        rank, _ = layout.ranks[local_rank]
        return {**self._cluster_env(layout), "MS_ROLE": "MS_WORKER", "MS_NODE_ID": str(rank)}

    def helpers(self, layout: Layout) -> list[Helper]:
        if layout.node_rank != 0:  # one scheduler per job, on node 0
            return []
        return [Helper("sched", "sched", {**self._cluster_env(layout), "MS_ROLE": "MS_SCHED"})]


class RankTableBackend(Backend):
    """Ascend with an HCCL rank table: this server's devices, DEVICE_ID = the runtime id of the
    physical device (davincirunsdk wrongly uses the list index)."""

    name = "rank-table"

    def layout(self, settings: Settings, options: LaunchOptions) -> Layout:
        from platform_plugin import ranktable
        table = settings.rank_table
        if table is None:
            raise fail("LAUNCH_NO_RANK_TABLE", "the rank-table backend needs a rank table: pass "
                       "--rank-table FILE or set RANK_TABLE_FILE", "RANK_TABLE_FILE")
        server = settings.server
        if server is None:
            server = ranktable.select_server(table, rank_start=settings.rank_start)
        devices = sorted(server.devices, key=lambda d: d.rank_id)
        if options.nproc and options.nproc != len(devices):
            raise fail("LAUNCH_NPROC_TABLE", f"the rank table gives server {server.server_id} "
                       f"{len(devices)} devices but --nproc is {options.nproc}: leave --nproc out "
                       "or use a table with the devices you want", "--nproc")
        node_rank = [s.server_id for s in table.servers].index(server.server_id)
        # DEVICE_ID is what the runtime calls the card: the physical id, renumbered from 0
        # when ASCEND_RT_VISIBLE_DEVICES hides some cards (a card outside it is an error).
        visible = settings.visible_devices
        return Layout(world_size=table.rank_size, node_rank=node_rank, nnodes=len(table.servers),
                      server_id=server.server_id,
                      ranks=tuple((d.rank_id, ranktable.runtime_device_id(d.device_id, visible))
                                  for d in devices),
                      master_addr=options.master_addr, master_port=None,
                      rank_table_file=table.path or settings.rank_table_file)

    def rank_env(self, layout: Layout, local_rank: int) -> dict[str, str]:
        rank, _ = layout.ranks[local_rank]
        return {"RANK_TABLE_FILE": str(layout.rank_table_file or ""),
                "RANK_START": str(layout.ranks[0][0])}


FRAMEWORK_BACKENDS: dict[str, Backend] = {b.name: b for b in (
    RankTableBackend(), MsClusterBackend(), TorchBackend())}
