"""Node 0's end of the job link: a ZeroMQ ROUTER on `--master-addr:--master-port + 1` that takes
the other launchers' joins, hands out the job's identity with "go", fans out stop requests and
collects every server's end of an attempt.

A connection is known by the routing id the ROUTER gives it. It must greet ("hello") before
anything else and join as one node in 1..nnodes-1, one connection per node. A message that
fails the checks of wire.py, or comes from a connection that did not greet or join, is refused
and its connection dropped. libzmq has no call to drop one peer of a ROUTER (it closes a
connection itself on junk bytes, a failed handshake, an oversized message or a missed
heartbeat), so the hub shuts the connection's descriptor down (a message names it: ZMQ_SRCFD;
the socket's monitor reports every accept and disconnect with it) and libzmq closes it. The
same caps the connections: past MAX_CONNECTIONS a new one is shut at once, so junk connections
never take the descriptors the job needs nor bring libzmq's accept to the descriptor limit
(where it would retry the accept in a loop).
"""
from __future__ import annotations

import dataclasses
import os
import resource
import socket
import time
from typing import Callable, Dict, List, Optional, Set

import zmq

from platform_plugin.errors import PlatformPluginError
from platform_plugin.launcher.servers.reach import WaitNote, ipv4_of, join_timeout
from platform_plugin.launcher.servers.socket_thread import Linked, socket_options
from platform_plugin.launcher.servers.wire import PROTOCOL, TO_NODE_0, Counters, valid_identity

MAX_GUESTS = 64  # connections that greeted but did not join yet, beyond the job's nodes
# A launcher joins as soon as it is welcomed (milliseconds; seconds on a loaded machine): a
# guest that has not joined by then is no launcher of the job. Guests never starve a real
# node: one that greets when MAX_GUESTS wait is welcomed, and the guest that greeted first is
# dropped; every guest is dropped GUEST_JOIN_S after its greeting, pinging or not.
GUEST_JOIN_S = 15.0
SUSPECT_RECHECK_S = 0.2  # libzmq closes a descriptor right after it reports its disconnect


# The TCP connections libzmq holds for the ROUTER, seen through their descriptors (the socket's
# monitor and ZMQ_SRCFD name them): how many the hub keeps, which connection a descriptor
# holds now, and how to make libzmq close one.
MAX_CONNECTIONS = 256  # beyond the job's nodes: what junk may hold open at once


def connection_cap(nnodes: int) -> int:
    """How many connections node 0 keeps: the job's launchers and MAX_CONNECTIONS more, and
    never more than a quarter of this process's descriptor limit (the ranks' pipes and the
    job's files need the rest; libzmq retries a failed accept in a loop at the limit)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = soft // 4 if soft != resource.RLIM_INFINITY else MAX_CONNECTIONS + nnodes
    return max(nnodes + 8, min(MAX_CONNECTIONS + nnodes, room))


def shut(fd: int, port: int) -> None:
    """Shut a connection libzmq holds down: libzmq then sees its end and closes it. Only a TCP
    connection accepted on `port`: an event read late may name a descriptor reused since."""
    try:
        with socket.socket(fileno=os.dup(fd)) as conn:
            if conn.type == socket.SOCK_STREAM and conn.getsockname()[1] == port:
                conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # closed meanwhile, or not a socket


TCP_ESTABLISHED = 1  # Linux's tcp_info.tcpi_state of an open connection


def peer_address(fd: int) -> object:
    """The peer address of the open connection on descriptor `fd`, None once it is closing or
    closed: two connections that use one descriptor one after the other have different ones.
    (libzmq reports a disconnect just before it closes the descriptor: a connection whose peer
    has gone is no longer ESTABLISHED then.)"""
    try:
        with socket.socket(fileno=os.dup(fd)) as conn:
            if hasattr(socket, "TCP_INFO") and conn.getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != TCP_ESTABLISHED:
                return None
            return conn.getpeername()
    except OSError:
        return None


@dataclasses.dataclass
class Peer:
    """A connection that greeted: its session, the node it joined as, what it was told."""

    sid: str
    heard: float  # when it last said anything
    greeted: float = 0.0  # when it said hello (a guest not joined GUEST_JOIN_S after is dropped)
    node: Optional[int] = None  # set once node 0 accepted its join
    joined: int = 0  # the attempt (1, 2, ...) it last joined; 0: none yet
    server: str = ""  # the server id it joined with (the rank table's, or node<I>)
    went: Set[int] = dataclasses.field(default_factory=set)  # the attempts told to start
    said_bye: bool = False


class Hub(Linked):
    """Node 0: accepts the other launchers, hands out the job identity, fans out stops."""

    def __init__(self, addr: str, port: int, nnodes: int, *, key: Optional[bytes],
                 note: Optional[Callable[[str], None]] = None, silence_s: float = 60.0,
                 table: bool = False):
        super().__init__(key, note, silence_s)
        self.nnodes, self.port, self.where = nnodes, port, f"{addr}:{port}"
        self.table = table  # the rank-table route: a server is a table entry, not a --node-rank
        self.peers: Dict[bytes, Peer] = {}
        self.ignored: Set[bytes] = set()  # refused connections, until they disconnect
        self.counters = Counters()
        self.outcomes: Dict[int, Dict[int, str]] = {}  # attempt -> {node: failed server or ""}
        self.joined: Dict[int, Set[int]] = {}
        self.vanished: List[str] = []  # servers whose launcher is gone after its "go"
        self.left: Set[int] = set()  # nodes whose launcher ended cleanly after its "go"
        self.connections: Set[int] = set()  # descriptors of the open connections
        self.cap = connection_cap(nnodes)
        self.last_tick = time.monotonic()
        self.rid_of: Dict[int, bytes] = {}  # descriptor -> routing id, once it sent something
        self.address_of: Dict[int, object] = {}  # descriptor -> its connection's peer address
        self.suspects: Dict[int, float] = {}  # descriptor -> when a disconnect named it, alive
        sock = self.context.socket(zmq.ROUTER)
        try:
            socket_options(sock, silence_s)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a gone peer fails, not drops
            # the kernel queues this many connections for libzmq's accept, no more (a flood's
            # others wait for their SYN to be sent again): what libzmq accepts before the cap
            # shuts it comes in bursts of at most this (every launcher of the job connects
            # twice at the start: reach's check, then ZeroMQ)
            sock.setsockopt(zmq.BACKLOG, 2 * nnodes + 32)
            sock.bind(f"tcp://{ipv4_of(addr)}:{port}")
            monitor = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        except (zmq.ZMQError, OSError) as exc:
            sock.close(0)
            self.finish()  # (no thread yet: closes the wake-up pipe)
            self.context.term()
            if isinstance(exc, zmq.ZMQError):  # as a socket's bind says it (open_link)
                raise OSError(exc.errno, exc.strerror) from None
            raise
        self.say_unsigned(self.where)
        self.start(sock, monitor)

    # -- what the launcher calls ---------------------------------------------------------

    def agree(self, identity: Dict[str, str], attempt: int) -> Dict[str, str]:
        if not valid_identity(identity):
            raise ValueError(f"not a job identity the link can send: {identity!r}")
        deadline, waiting = time.monotonic() + join_timeout(), WaitNote(self.note)
        with self.cond:
            while len(self.joined.get(attempt, ())) < self.nnodes - 1:
                if self.broken:
                    raise PlatformPluginError(f"multi-server start failed: {self.broken}")
                # ended after an earlier attempt (Ctrl-C there never restarts; its own
                # --max-restarts used up): it will not join this one
                ended = sorted(self.left - self.joined.get(attempt, set()))
                if ended:
                    raise PlatformPluginError(
                        f"the launcher of {', '.join(f'node{n}' for n in ended)} ended without "
                        f"starting attempt {attempt} (interrupted, its --max-restarts used "
                        "up, or it failed: its output says)")
                left = deadline - time.monotonic()
                if not self.alive():
                    raise PlatformPluginError("multi-server start failed: the job link on "
                                              "this server stopped (its output says why)")
                if left <= 0:
                    raise PlatformPluginError(
                        f"node(s) {self._missing(attempt)} did not join within "
                        f"{join_timeout():g}s (they connect to --master-addr:--master-port+1 "
                        "before starting their ranks); PLATFORM_RENDEZVOUS_TIMEOUT sets the wait")
                waiting.check(lambda: f"waiting for node(s) {self._missing(attempt)} to join "
                                      + (f"attempt {attempt} " if attempt > 1 else "")
                                      + f"on {self.where} (up to {join_timeout():g}s, "
                                      "PLATFORM_RENDEZVOUS_TIMEOUT)")
                self.cond.wait(min(left, 0.5))
            # only those that joined this attempt (not one refused, nor one still connecting)
            peers = [(rid, p) for rid, p in self.peers.items()
                     if p.node is not None and p.joined == attempt]
            for _, peer in peers:
                peer.went.add(attempt)
        for rid, peer in peers:
            self._send(rid, peer, "go", attempt=attempt, identity=dict(identity))
        return dict(identity)

    def _missing(self, attempt: int) -> list[int]:
        return sorted(set(range(1, self.nnodes)) - self.joined.get(attempt, set()))

    def tell_failed(self, server: str, reason: str, attempt: int) -> None:
        self._stop_all(server, reason, attempt, source=None)

    def gone(self) -> list[str]:
        with self.cond:
            return list(self.vanished)

    def conclude(self, attempt: int, ok: bool, server: str) -> list[str]:
        with self.cond:
            ended = self.outcomes.setdefault(attempt, {})
            ended[0] = "" if ok else server
            # a server that falls silent is entered by the link's thread (tick): no endless wait
            while len(ended) < self.nnodes and self.alive():
                self.cond.wait(0.5)
            for node in range(self.nnodes):
                ended.setdefault(node, f"node{node}")
            failed = sorted({f for f in ended.values() if f})
            peers = list(self.peers.items())
        for rid, peer in peers:
            self._send(rid, peer, "outcome", attempt=attempt, failed=failed)
        return failed

    def close(self) -> None:
        with self.cond:
            peers = list(self.peers.items())
        for rid, peer in peers:
            self._send(rid, peer, "bye")
        self.finish()

    # -- the link's thread -----------------------------------------------------------------

    def _send(self, rid: bytes, peer: Peer, op: str, **fields: object) -> None:
        self.post([rid, *self.wire.pack(op, to=peer.sid, **fields)])

    def _stop_all(self, server: str, reason: str, attempt: int, source: Optional[bytes]) -> None:
        with self.cond:
            if attempt in self.stops:
                return
            self.stops[attempt] = f"server {server}: {reason}"
            self.cond.notify_all()
            peers = [(rid, p) for rid, p in self.peers.items() if rid != source]
        for rid, peer in peers:
            self._send(rid, peer, "stop", server=server, reason=reason, attempt=attempt)

    def _current(self) -> int:
        with self.cond:
            return max(self.joined, default=1)

    def handle_event(self, monitor: zmq.Socket) -> bool:
        """An accepted connection (capped) or a closed one (what it meant for the job)."""
        try:
            event, _ = monitor.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return False
        kind, fd = int.from_bytes(event[:2], "little"), int.from_bytes(event[2:6], "little")
        if kind == zmq.EVENT_ACCEPTED:
            self.connections.add(fd)
            if len(self.connections) > self.cap:
                self.refused("too many connections", f"more than {self.cap} connections at "
                             "once")
                shut(fd, self.port)
            return True
        # what the connection sent before it closed (a "bye") counts first; the first message
        # of a connection that took this descriptor since may be among it
        while self.socket is not None and self.receive_one(self.socket):
            pass
        if self._still_open(fd):
            # a late event of an earlier connection whose descriptor a live one took since (a
            # launcher's TCP probe before its DEALER connects), or libzmq about to close a live
            # one itself (a missed ZMTP heartbeat, an oversized message): tick looks again
            self.suspects[fd] = time.monotonic()
            return True
        self._closed(fd)
        return True

    def _still_open(self, fd: int) -> bool:
        """The connection that last sent on `fd` is still the one open on it."""
        live = peer_address(fd)
        return fd in self.rid_of and live is not None and live == self.address_of.get(fd)

    def _closed(self, fd: int) -> None:
        """The connection on `fd` closed: what it meant for the job."""
        self.connections.discard(fd)
        self.address_of.pop(fd, None)
        self.suspects.pop(fd, None)
        rid = self.rid_of.pop(fd, None)
        if rid is not None:
            self.ignored.discard(rid)
            self._lost(rid, "its launcher is gone")

    def handle(self, frames: List[bytes], fd: int) -> None:
        rid, rest = frames[0], frames[1:]
        if rid in self.ignored:
            return
        if self.rid_of.get(fd) != rid:
            self.rid_of[fd], self.address_of[fd] = rid, peer_address(fd)
        message, why = self.wire.unpack(rest, TO_NODE_0)
        peer = self.peers.get(rid)
        if message is not None:
            why = self._unwelcome(message, peer)
        if message is None or why:
            self._refuse(rid, why)
            return
        if peer is not None:
            peer.heard = time.monotonic()
        getattr(self, f"_on_{message['op']}")(rid, peer, message)

    def _unwelcome(self, message: dict, peer: Optional[Peer]) -> str:
        """Why a well-formed message is refused from this connection, "" when it is not."""
        op = message["op"]
        if not self.counters.fresh(message):
            return f"replayed: {op}, a message seen before"
        if op != "hello" and (peer is None or peer.sid != message["sid"]):
            return f"not greeted: {op} from a connection that did not greet"
        if op in ("failed", "ended") and (peer is None or peer.node is None):
            return f"not joined: {op} from a connection that did not join"
        return ""

    def _refuse(self, rid: bytes, why: str) -> None:
        kind = why.split(":")[0].split(" (")[0]
        self.refused(kind, why)
        self.ignored.add(rid)
        for fd in [fd for fd, known in self.rid_of.items() if known == rid]:
            shut(fd, self.port)
        if rid in self.peers:
            self._lost(rid, "it sent a message the link refused")

    def _on_hello(self, rid: bytes, peer: Optional[Peer], message: dict) -> None:
        if peer is not None:
            self._refuse(rid, "hello: a second greeting on one connection")
            return
        guests = sorted((p.greeted, guest) for guest, p in self.peers.items() if p.node is None)
        if len(guests) >= MAX_GUESTS:  # the newcomer may be the job's launcher: it is welcomed
            self._refuse(guests[0][1], f"guest: more than {MAX_GUESTS} connections greeted "
                         "without joining; the one that greeted first is dropped")
        now = time.monotonic()
        peer = Peer(message["sid"], now, greeted=now)
        with self.cond:  # (agree, conclude and close read the peers from other threads)
            self.peers[rid] = peer
        self._send(rid, peer, "welcome", protocol=PROTOCOL)

    def _on_join(self, rid: bytes, peer: Peer, message: dict) -> None:
        node, attempt = message["node"], message["attempt"]
        if not 1 <= node < self.nnodes or peer.node not in (None, node):
            self._refuse(rid, f"join: node {node} is not one of 1..{self.nnodes - 1}"
                         if peer.node is None else "join: another node on one connection")
            return
        if message["nnodes"] != self.nnodes:
            self._send(rid, peer, "refused", reason=(
                f"the first server's rank table lists {self.nnodes} servers, this launcher's "
                f"{message['nnodes']}: every server needs the same table" if self.table else
                f"node 0 runs --nnodes {self.nnodes}, this launcher {message['nnodes']}"))
            return
        with self.cond:
            # a second launcher of one server would start the same ranks again
            twin = next((p for r, p in self.peers.items() if r != rid and p.node == node), None)
            if twin is not None:
                refused = self._twin_refusal(node, twin.server)
            else:
                refused = ""
                peer.node, peer.joined, peer.server = node, attempt, message["server"]
                self.joined.setdefault(attempt, set()).add(node)
                self.cond.notify_all()
        if refused:
            self._send(rid, peer, "refused", reason=refused)

    def _twin_refusal(self, node: int, server: str) -> str:
        """Why a second launcher of one server is refused, in the words of the job's route."""
        if self.table:
            # the rank table chooses a launcher's server by RANK_START (else its address)
            return (f"another launcher already joined as the rank table's server {server}: "
                    "every server of the table runs one launcher, whose RANK_START is the first "
                    "rank of its own server_id in the table")
        return (f"another launcher already joined as --node-rank {node}: every server needs "
                f"its own --node-rank (1..{self.nnodes - 1} besides node 0)")

    def _on_failed(self, rid: bytes, peer: Peer, message: dict) -> None:
        self._stop_all(message["server"], message["reason"], message["attempt"], rid)

    def _on_ended(self, rid: bytes, peer: Peer, message: dict) -> None:
        with self.cond:
            self.outcomes.setdefault(message["attempt"], {})[peer.node or 0] = (
                "" if message["ok"] else message["server"])
            self.cond.notify_all()

    def _on_ping(self, rid: bytes, peer: Peer, message: dict) -> None:
        pass  # heard: that is all a ping says

    def _on_bye(self, rid: bytes, peer: Peer, message: dict) -> None:
        peer.said_bye = True

    def _lost(self, rid: bytes, why: str) -> None:
        """A connection closed, fell silent or was refused: what it means for the job."""
        with self.cond:
            peer = self.peers.pop(rid, None)
            if peer is None or peer.node is None or self.closing:
                return
            if not peer.went:  # gone (Ctrl-C, killed) while it waited: it started nothing
                self.joined.get(peer.joined, set()).discard(peer.node)
                return
            if peer.said_bye:  # ended cleanly after an attempt: it joins no later one
                self.left.add(peer.node)
                self.cond.notify_all()
                return
            server = peer.server or f"node{peer.node}"
            # no later attempt can start without it (agree() would wait for it in vain)
            self.broken = self.broken or f"server {server}: {why}"
            self.vanished.append(server)
        attempt = self._current()
        self._stop_all(server, why, attempt, rid)
        with self.cond:  # it will never report: its part of the job failed
            self.outcomes.setdefault(attempt, {}).setdefault(peer.node, server)
            self.cond.notify_all()

    def tick(self, now: float) -> None:
        """Ping every connection that greeted; one silent past the deadline is lost; a
        disconnect that named a live connection is looked at again (libzmq has closed it by
        now, or it was an earlier connection's)."""
        stalled, self.last_tick = now - self.last_tick, now
        if stalled > self.silence_s:
            # this launcher was the frozen one: every other server has stopped its part by now
            why = (f"this launcher was frozen for {stalled:.0f} s (past the heartbeat deadline): "
                   "the other servers took this server for failed")
            with self.cond:  # (before the others' silence below names them instead)
                self.broken = self.broken or why
                self.stops.setdefault(self._current(), why)
                self.cond.notify_all()
        for fd, since in list(self.suspects.items()):
            if now - since >= SUSPECT_RECHECK_S:
                if self._still_open(fd):
                    del self.suspects[fd]
                else:
                    self._closed(fd)
        for rid, peer in list(self.peers.items()):
            if peer.node is None and now - peer.greeted > GUEST_JOIN_S:
                self._refuse(rid, f"guest: greeted {GUEST_JOIN_S:g} s ago and did not join (a "
                             "launcher joins as soon as it is welcomed)")
            elif now - peer.heard > self.silence_s:
                self.ignored.add(rid)
                self._lost(rid, f"silent for {self.silence_s:g} s (frozen or cut off)")
            else:
                self._send(rid, peer, "ping")
