"""The job link's interface and the link of a single-server job (nobody to talk to).

`open_link(plan)` gives a multi-server `--nnodes` job its link (launcher/servers/joblink.py: node 0's
Hub, the others' Spokes, over a socket); every other job gets the no-op `JobLink`, without
loading joblink.py at all (start-up time of a plain launch).
"""
from __future__ import annotations

from platform_plugin.errors import ConfigError, Problem

CONTROL_PORT_OFFSET = 1  # the control port is the rendezvous port + 1


class JobLink:
    """A single-server job: nobody to talk to. Every multi-server link has the same methods."""

    def agree(self, job_id: str, attempt: int) -> str:
        """Block until every launcher of the job reached this attempt; returns node 0's job id."""
        return job_id

    def tell_failed(self, server: str, reason: str, attempt: int) -> None:
        pass

    def stop_reason(self, attempt: int) -> str | None:
        """Why another server's launcher asked to stop this attempt, or None."""
        return None

    def gone(self) -> list[str]:
        """The servers whose launcher vanished after the job started: they will never report
        their end on the job's parent run, so this one does it for them."""
        return []

    def conclude(self, attempt: int, ok: bool, server: str) -> list[str]:
        """Block until every server's ranks of this attempt ended; the servers that failed."""
        return [] if ok else [server]

    def close(self) -> None:
        pass


def open_link(plan, note=None) -> JobLink:
    """The link of a plan: node 0 listens, the others connect; a single server needs none.
    `note(text)`: what a launcher says once it has waited a moment for the others.
    The rank-table route has no rendezvous address: its servers agree on a job key instead
    (job_key.py) and stop each other through the tracking server."""
    if plan.nnodes <= 1 or plan.master_port is None or plan.backend == "rank-table":
        return JobLink()
    from platform_plugin.launcher.servers.joblink import Hub, Spoke
    port = plan.master_port + CONTROL_PORT_OFFSET
    if plan.node_rank == 0:
        try:
            return Hub(plan.master_addr, port, plan.nnodes, note)
        except OSError as exc:
            import errno
            import socket
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
    return Spoke(plan.master_addr, port, plan.node_rank, plan.nnodes, plan.server_id, note)
