"""Which job link a job gets: `open_link(place, options)` gives node 0 of a multi-server job a
`Hub` and every other server a `Spoke` (link_protocol.py); a single server gets the no-op `JobLink`.

Both routes use the same channel:
- `--nnodes`: node 0's launcher listens on `--master-port + 1` of `--master-addr`;
- the rank table (several servers): the table's first server listens on its `server_id` (an
  address) and port `--control-port` / PLATFORM_CONTROL_PORT (default RANK_TABLE_CONTROL_PORT);
  the others find it in the same table. The key authenticating the channel comes from the
  table's bytes (signing_key.rank_table_key) unless `--job-key` gives one (signing_key.py).
A control port node 0 cannot listen on is a configuration error, said here.
"""
from __future__ import annotations

import errno
import socket
from typing import Callable

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.planning.plan import JobPlace
from platform_plugin.launcher.servers.link_protocol import JobLink
from platform_plugin.variables import RANK_TABLE_CONTROL_PORT

CONTROL_PORT_OFFSET = 1  # --nnodes route: the control port is the rendezvous port + 1


def open_link(place: JobPlace, options: LaunchOptions,
              note: Callable[[str], None] | None = None) -> JobLink:
    """The link of a job: node 0 listens, the others connect; a single server needs none.
    `note(text)`: what a launcher says once it has waited a moment for the others."""
    if place.nnodes <= 1:
        return JobLink()
    table = place.backend == "rank-table"
    if table:
        addr, port = place.first_server, options.control_port or RANK_TABLE_CONTROL_PORT
    elif place.master_port is None:
        return JobLink()
    else:
        addr, port = place.master_addr, place.master_port + CONTROL_PORT_OFFSET
    # a multi-server job's path only: ZeroMQ, hmac and hashlib stay out of a single-server launch
    from platform_plugin.launcher.servers.hub import Hub
    from platform_plugin.launcher.servers.signing_key import (DEFAULT_SILENCE_S,
                                                              rank_table_key, signing_key)
    from platform_plugin.launcher.servers.spoke import Spoke
    key = signing_key(options.job_key, options.job_id,
                      derived=rank_table_key(place.rank_table_file, options.job_id) if table else None)
    silence_s = options.heartbeat_timeout or DEFAULT_SILENCE_S
    if place.node_rank == 0:
        try:
            return Hub(addr, port, place.nnodes, key=key, note=note, silence_s=silence_s,
                       table=table)
        except OSError as exc:
            raise _unbound(exc, addr, port, table) from None
    return Spoke(addr, port, place.node_rank, place.nnodes, place.server_id, key=key, note=note,
                 silence_s=silence_s, hub_server=place.first_server if table else "node0")


def _unbound(exc: OSError, addr: str, port: int, table: bool) -> ConfigError:
    """Why node 0 cannot listen, and which setting to change."""
    where = "--master-addr" if not table else "the rank table's first server_id"
    flag = "--master-port" if not table else "--control-port"
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        # not a port clash: another port would fail the same way
        why = ("does not resolve on this server" if isinstance(exc, socket.gaierror)
               else "is not an address of this server")
        return ConfigError([Problem(
            "LAUNCH_MASTER_ADDR", f"{where} {addr[:80]!r} {why} ({exc.strerror or exc}): node "
            f"0's launcher runs on the server that {where} names, and listens there", where)])
    # most often another node 0 already listens there: this job's (the same --node-rank
    # twice) or another job's given the same port
    node_0 = "with --node-rank 0" if not table else "of the rank table's first server"
    held = (f" - another launcher {node_0} (of this job, or of another job with this {flag}) "
            "may hold it; else" if exc.errno == errno.EADDRINUSE else ":")
    port_is = "--master-port + 1" if not table else "--control-port / PLATFORM_CONTROL_PORT"
    return ConfigError([Problem(
        "LAUNCH_PORT_BUSY", f"the launchers' control port {port} ({port_is}) on {addr} cannot be "
        f"bound ({exc.strerror}){held} choose another {flag} on every server", flag)])
