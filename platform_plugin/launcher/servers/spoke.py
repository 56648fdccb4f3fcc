"""Every other node's end of the job link: a ZeroMQ DEALER connected to node 0's ROUTER. It
greets node 0 ("hello" -> "welcome": both sessions known, wire.py), joins each attempt, learns
node 0's job identity from "go", hears stop requests and every attempt's outcome.

Node 0 silent past the heartbeat deadline (a frozen launcher, a cut network) or its connection
closed without "bye" breaks the link: this launcher stops its ranks and names node 0.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional

import zmq

from platform_plugin.errors import PlatformPluginError
from platform_plugin.launcher.servers.reach import (HELLO_S, WaitNote, busy, ipv4_of,
                                                    join_timeout, reach)
from platform_plugin.launcher.servers.socket_thread import Linked, socket_options
from platform_plugin.launcher.servers.wire import FROM_NODE_0, PROTOCOL, Counters


class Spoke(Linked):
    """Node >= 1: joins node 0 and learns the job identity from it; hears stop requests."""

    def __init__(self, addr: str, port: int, node: int, nnodes: int, server: str, *,
                 key: Optional[bytes], note: Optional[Callable[[str], None]] = None,
                 silence_s: float = 60.0, hub_server: str = "node0"):
        super().__init__(key, note, silence_s)
        self.node, self.nnodes, self.server = node, nnodes, server
        self.hub_server = hub_server  # how node 0's server is named: node0, or the table's id
        self.hub_name = ("node 0" if hub_server == "node0"
                         else f"the first server {hub_server}")
        self.goes: Dict[int, Dict[str, str]] = {}
        self.outcomes: Dict[int, List[str]] = {}
        self.refusal = ""
        self.hub_sid = ""  # node 0's session, from its welcome
        self.said_bye = False
        self.heard = self.last_tick = time.monotonic()
        self.counters = Counters()
        try:
            reach(addr, port, note, table=hub_server != "node0")
        except BaseException:
            self.finish()  # (no thread yet: closes the wake-up pipe)
            self.context.term()
            raise
        sock = self.context.socket(zmq.DEALER)
        socket_options(sock, silence_s)
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        sock.connect(f"tcp://{ipv4_of(addr)}:{port}")
        self.say_unsigned(f"{addr}:{port}")
        self.start(sock, monitor)
        self.post(self.wire.pack("hello", protocol=PROTOCOL))
        with self.cond:
            self.cond.wait_for(lambda: self.hub_sid or self.broken, HELLO_S)
            welcomed = bool(self.hub_sid)
        if not welcomed:
            self.finish()
            table = hub_server != "node0"
            raise busy(addr, port, f"a ZeroMQ peer that did not welcome this launcher within "
                       f"{HELLO_S:g}s (another program, or {self.hub_name} with another job "
                       "key: " + ("the same rank table, and --job-key / PLATFORM_JOB_KEY / "
                                  "PLATFORM_JOB_ID if given, on every server)" if table else
                                  "--job-key / PLATFORM_JOB_KEY / PLATFORM_JOB_ID must be the "
                                  "same on every server)"), table)

    def _send(self, op: str, **fields: object) -> None:
        self.post(self.wire.pack(op, to=self.hub_sid, **fields))

    def agree(self, identity: Dict[str, str], attempt: int) -> Dict[str, str]:
        self._send("join", node=self.node, server=self.server, attempt=attempt,
                   nnodes=self.nnodes)
        deadline, waiting = time.monotonic() + join_timeout(), WaitNote(self.note)
        with self.cond:
            while attempt not in self.goes:
                if self.refusal:
                    raise PlatformPluginError(f"{self.hub_name} refused this launcher: "
                                              f"{self.refusal}")
                if self.broken:
                    raise PlatformPluginError(f"multi-server start failed: {self.broken}")
                if self.said_bye:  # it closed cleanly without starting this attempt
                    raise PlatformPluginError(
                        f"{self.hub_name}'s launcher ended without starting " +
                        ("the job" if attempt == 1 else f"attempt {attempt}") +
                        " (interrupted, or it failed or decided not to restart: its output says)")
                left = deadline - time.monotonic()
                if not self.alive():
                    raise PlatformPluginError("multi-server start failed: the job link on "
                                              "this server stopped (its output says why)")
                if left <= 0:
                    raise PlatformPluginError(f"{self.hub_name} did not start the job within "
                                              f"{join_timeout():g}s (other nodes missing?)")
                waiting.check(lambda: f"joined {self.hub_name}; waiting for it to start "
                                      + (f"attempt {attempt}" if attempt > 1 else "the job")
                                      + " (once every server's launcher has joined; up to "
                                      f"{join_timeout():g}s)")
                self.cond.wait(min(left, 0.5))
            return dict(self.goes[attempt])

    def tell_failed(self, server: str, reason: str, attempt: int) -> None:
        with self.cond:
            self.stops.setdefault(attempt, f"server {server}: {reason}")
        self._send("failed", server=server, reason=reason, attempt=attempt)

    def gone(self) -> list[str]:
        with self.cond:
            return [self.hub_server] if self.broken else []

    def conclude(self, attempt: int, ok: bool, server: str) -> list[str]:
        self._send("ended", attempt=attempt, ok=ok, server=server)
        with self.cond:
            while attempt not in self.outcomes:
                if self.broken or not self.alive():  # node 0 gone: its part of the job is lost
                    return sorted({self.hub_server} | (set() if ok else {server}))
                self.cond.wait(0.5)
            return list(self.outcomes[attempt])

    def close(self) -> None:
        if self.hub_sid:
            self._send("bye")
        self.finish()

    # -- the link's thread -----------------------------------------------------------------

    def handle(self, frames: List[bytes], fd: int) -> None:
        message, why = self.wire.unpack(frames, FROM_NODE_0)
        if message is not None:
            why = self._unwelcome(message)
        if message is None or why:  # only node 0 is connected here: refuse it, keep the link
            self.refused(why.split(":")[0], why)
            return
        op = message["op"]
        with self.cond:
            self.heard = time.monotonic()
            if op == "welcome":
                self.hub_sid = message["sid"]
            elif op == "go":
                self.goes[message["attempt"]] = message["identity"]
            elif op == "stop":
                self.stops.setdefault(message["attempt"],
                                      f"server {message['server']}: {message['reason']}")
            elif op == "refused":
                self.refusal = message["reason"]
            elif op == "outcome":
                self.outcomes[message["attempt"]] = message["failed"]
            elif op == "bye":
                self.said_bye = True
            self.cond.notify_all()

    def _unwelcome(self, message: dict) -> str:
        """Why a well-formed message from node 0's connection is refused, "" when it is not."""
        op = message["op"]
        if not self.counters.fresh(message):
            return f"replayed: {op}, a message seen before"
        if self.hub_sid and message["sid"] != self.hub_sid:
            return f"{op}: from another session than node 0's"
        if not self.hub_sid and op != "welcome":
            return f"{op}: before node 0's welcome"
        return ""

    def handle_event(self, monitor: zmq.Socket) -> bool:
        """The connection to node 0 closed: without its "bye", its launcher is gone."""
        try:
            monitor.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return False
        with self.cond:
            if self.hub_sid and not self.closing and not self.said_bye:
                self.broken = self.broken or f"server {self.hub_server}: its launcher is gone"
            self.cond.notify_all()
        return True

    def tick(self, now: float) -> None:
        with self.cond:
            stalled, self.last_tick = now - self.last_tick, now
            if self.hub_sid and not self.said_bye and now - self.heard > self.silence_s:
                # a gap this long between two ticks: this launcher was the frozen one
                self.broken = self.broken or (
                    f"this launcher was frozen for {stalled:.0f} s (past the heartbeat "
                    f"deadline): {self.hub_name} took this server for failed" if stalled > self.silence_s
                    else f"server {self.hub_server}: silent for {self.silence_s:g} s (frozen or "
                    "cut off)")
                self.cond.notify_all()
        if self.hub_sid and not self.broken:
            self._send("ping")
