"""The launchers of one multi-server job talk to each other: one job identity, start together,
stop together, restart together. `JobLink` is the interface (and the link of a single-server
job: nobody to talk to); `Hub` (node 0, hub.py) and `Spoke` (every other node, spoke.py)
implement it over ZeroMQ.

No new daemon: node 0's launcher binds a ROUTER on `--master-port + 1` of `--master-addr` (the
address every server already reaches for the rendezvous) for the life of the job; the launchers
of the other nodes connect a DEALER to it before starting their ranks. ZeroMQ frames the
messages, caps their size, closes connections that do not speak its protocol and keeps TCP
alive with its heartbeats; wire.py signs and checks every message.

Protocol (wire.py holds each message's fields; every message carries its sender's session and
counter, every one after "hello" the receiver's session):
    node>=1 -> node 0   hello {protocol}                 once connected, before anything else
    node 0  -> node>=1  welcome {protocol}               node 0's session, for all that follows
    node>=1 -> node 0   join {node, server, attempt, nnodes}
    node 0  -> node>=1  go {attempt, identity}           once all N-1 joined: node 0's identity
    any     -> node 0   failed {server, reason, attempt}
    node 0  -> node>=1  stop {server, reason, attempt}
    node>=1 -> node 0   ended {attempt, ok, server}      its ranks ended
    node 0  -> node>=1  outcome {attempt, failed}        all servers ended
    either  -> other    ping {}                          every second (heartbeat deadline / 5)
    either  -> other    bye {}                           before a clean close
    node 0  -> node>=1  refused {reason}                 a join node 0 cannot take
A launcher that closes its connection without "bye", or says nothing for the heartbeat deadline
(`--heartbeat-timeout`, a frozen process or a cut network), after it was told "go" failed: the
others stop (its ranks are gone or cut off, so a collective would hang for its 30-minute
timeout) and no later attempt can start. One that goes before its "go" started nothing: node 0
forgets its join and waits on for that node, so a launcher killed while it waits for the
others can simply be started again. How the others reach node 0 (and tell it from another
program on its port): reach.py.
"""
from __future__ import annotations

from typing import Dict


class JobLink:
    """A single-server job: nobody to talk to. Every multi-server link has the same methods."""

    def agree(self, identity: Dict[str, str], attempt: int) -> Dict[str, str]:
        """Block until every launcher of the job reached this attempt; returns node 0's
        identity of the job (a flat str -> str dict: job id, experiment, ...)."""
        return identity

    def tell_failed(self, server: str, reason: str, attempt: int) -> None:
        pass

    def stop_reason(self, attempt: int) -> str | None:
        """Why another server's launcher asked to stop this attempt, or None."""
        return None

    def gone(self) -> list[str]:
        """The servers whose launcher vanished (or fell silent) after the job started: they
        will never report their end on the job's parent run, so this one does it for them."""
        return []

    def conclude(self, attempt: int, ok: bool, server: str) -> list[str]:
        """Block until every server's ranks of this attempt ended (a server silent past the
        heartbeat deadline counts as failed); the servers that failed."""
        return [] if ok else [server]

    def close(self) -> None:
        pass
