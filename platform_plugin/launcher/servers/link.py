"""Which job link a plan gets: `open_link(plan)` gives a multi-server `--nnodes` job node 0's
`Hub` or another node's `Spoke` (joblink.py, over a socket); every other job gets the no-op
`JobLink`. A control port node 0 cannot listen on is a configuration error, said here.
"""
from __future__ import annotations

import errno
import socket

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.servers.joblink import JobLink

CONTROL_PORT_OFFSET = 1  # the control port is the rendezvous port + 1


def open_link(plan, note=None, *, job_key: str | None = None, job_id: str | None = None,
              silence_s: float | None = None) -> JobLink:
    """The link of a plan: node 0 listens, the others connect; a single server needs none.
    `note(text)`: what a launcher says once it has waited a moment for the others.
    The rank-table route has no rendezvous address: its servers agree on a job key instead
    (job_key.py) and stop each other through the tracking server."""
    if plan.nnodes <= 1 or plan.master_port is None or plan.backend == "rank-table":
        return JobLink()
    # a multi-server job's path only: ZeroMQ, hmac and hashlib stay out of a single-server launch
    from platform_plugin.launcher.servers.hub import Hub
    from platform_plugin.launcher.servers.link_key import DEFAULT_SILENCE_S, link_key
    from platform_plugin.launcher.servers.spoke import Spoke
    key, silence_s = link_key(job_key, job_id), silence_s or DEFAULT_SILENCE_S
    port = plan.master_port + CONTROL_PORT_OFFSET
    if plan.node_rank == 0:
        try:
            return Hub(plan.master_addr, port, plan.nnodes, key=key, note=note,
                       silence_s=silence_s)
        except OSError as exc:
            # not a port clash: another --master-port would fail the same way
            if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
                why = ("does not resolve on this server" if isinstance(exc, socket.gaierror)
                       else "is not an address of this server")
                raise ConfigError([Problem(
                    "LAUNCH_MASTER_ADDR", f"--master-addr {plan.master_addr[:80]!r} {why} "
                    f"({exc.strerror or exc}): node 0's launcher runs on the server that "
                    "--master-addr names, and listens there", "--master-addr")]) from None
            # most often another node 0 already listens there: this job's (the same
            # --node-rank twice) or another job's given the same --master-port
            held = (" - another launcher with --node-rank 0 (of this job, or of another job "
                    "with this --master-port) may hold it; else" if exc.errno == errno.EADDRINUSE
                    else ":")
            raise ConfigError([Problem(
                "LAUNCH_PORT_BUSY", f"the launchers' control port {port} (--master-port + 1) on "
                f"{plan.master_addr} cannot be bound ({exc.strerror}){held} choose another "
                "--master-port on every server", "--master-port")]) from None
    return Spoke(plan.master_addr, port, plan.node_rank, plan.nnodes, plan.server_id, key=key,
                 note=note, silence_s=silence_s)
