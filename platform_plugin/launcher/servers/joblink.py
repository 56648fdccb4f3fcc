"""The launchers of one multi-server job talk to each other: one job id, start together, stop
together, restart together. `JobLink` is the interface (and the link of a single-server job:
nobody to talk to); `Hub` (node 0) and `Spoke` (every other node) implement it.

No new daemon: node 0's launcher listens on `--master-port + 1` of `--master-addr` (the address
every server already reaches for the rendezvous) for the life of the job; the launchers of the
other nodes connect to it before starting their ranks and keep the connection open.

Protocol (one JSON object per line):
    node 0  -> node>=1  {"op": "hello", "protocol": 1}          on accept, before anything else
    node>=1 -> node 0   {"op": "join", "node": I, "server": ID, "attempt": A, "nnodes": N}
    node 0  -> node>=1  {"op": "go", "identity": {...}, "attempt": A}  once all N-1 joined
    any     -> node 0   {"op": "failed", "server": ID, "reason": ..., "attempt": A}
    node 0  -> node>=1  {"op": "stop", "server": ID, "reason": ..., "attempt": A}
    node>=1 -> node 0   {"op": "ended", "attempt": A, "ok": B, "server": ID}   its ranks ended
    node 0  -> node>=1  {"op": "outcome", "attempt": A, "failed": [IDs]}    all servers ended
    either  -> other    {"op": "bye"}                                   before a clean close
    node 0  -> node>=1  {"op": "refused", "reason": ...}     a join node 0 cannot take
A connection that closes without "bye" after its launcher was told "go" means that launcher
died: the others stop (its ranks are gone, so a collective would hang for its 30-minute
timeout) and no later attempt can start (a restart would wait for it). One that closes before
its "go" started nothing: node 0 forgets its join and waits on for that node, so a launcher
killed while it waits for the others can simply be started again. How the others reach node
0 (and tell it from another program on its port): joblink_dial.py.
"""
from __future__ import annotations

import json
import selectors
import socket
import threading
import time
from typing import cast

from platform_plugin.errors import PlatformPluginError
from platform_plugin.launcher.servers.joblink_dial import PROTOCOL, WaitNote, dial, join_timeout


class JobLink:
    """A single-server job: nobody to talk to. Every multi-server link has the same methods."""

    def agree(self, identity: dict[str, str], attempt: int) -> dict[str, str]:
        """Block until every launcher of the job reached this attempt; node 0's identity."""
        return identity

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


class _Peer:
    """One line-oriented JSON connection."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""
        self.node: int | None = None  # set once node 0 accepted its join
        self.joined = -1  # the attempt it last joined
        self.went: set[int] = set()  # the attempts it was told to start
        self.said_bye = False
        self.lock = threading.Lock()

    def send(self, message: dict) -> None:
        with self.lock:
            try:
                self.sock.sendall(json.dumps(message).encode() + b"\n")
            except OSError:
                pass  # the reader sees the connection close and reports it

    def read(self) -> list[dict] | None:
        """The complete messages now readable; None at EOF."""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError, socket.timeout):
            return []
        except OSError:
            data = b""
        if not data:
            return None
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


class _Linked(JobLink):
    """State shared by both ends: what each attempt was told, guarded by one condition."""

    def __init__(self):
        self.cond = threading.Condition()
        self.stops: dict[int, str] = {}
        self.outcomes: dict[int, dict] = {}  # attempt -> {node: failed server or ""} / result
        self.closing = False
        self.broken = ""  # set when the other end vanished (applies to every later attempt)
        self.thread: threading.Thread | None = None

    def stop_reason(self, attempt: int) -> str | None:
        with self.cond:
            return self.stops.get(attempt) or self.broken or None

    def _start_reader(self, target) -> None:
        self.thread = threading.Thread(target=target, name="job-link", daemon=True)
        self.thread.start()


class Hub(_Linked):
    """Node 0: accepts the other launchers, hands out the job id, fans out stop requests."""

    def __init__(self, addr: str, port: int, nnodes: int, *, key: bytes | None, note=None,
                 silence_s: float = 60.0):
        super().__init__()
        self.nnodes, self.where, self.note = nnodes, f"{addr}:{port}", note
        self.peers: list[_Peer] = []
        self.joined: dict[int, set[int]] = {}
        self.vanished: list[str] = []  # servers whose launcher is gone after its "go"
        self.left: set[int] = set()  # nodes whose launcher ended cleanly after its "go"
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((addr, port))
        self.listener.listen(max(8, nnodes))
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self._start_reader(self._loop)

    def agree(self, identity: dict[str, str], attempt: int) -> dict[str, str]:
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
                        f"starting attempt {attempt + 1} (interrupted, its --max-restarts used "
                        "up, or it failed: its output says)")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PlatformPluginError(
                        f"node(s) {self._missing(attempt)} did not join within "
                        f"{join_timeout():g}s (they connect to --master-addr:--master-port+1 "
                        "before starting their ranks); PLATFORM_RENDEZVOUS_TIMEOUT sets the wait")
                waiting.check(lambda: f"waiting for node(s) {self._missing(attempt)} to join "
                                      + (f"attempt {attempt + 1} " if attempt else "")
                                      + f"on {self.where} (up to {join_timeout():g}s, "
                                      "PLATFORM_RENDEZVOUS_TIMEOUT)")
                self.cond.wait(min(left, 0.5))
            # only those that joined this attempt (not one refused, nor one still connecting)
            peers = [p for p in self.peers if p.node is not None and p.joined == attempt]
            for peer in peers:
                peer.went.add(attempt)
        for peer in peers:
            peer.send({"op": "go", "identity": identity, "attempt": attempt})
        return identity

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
            while len(ended) < self.nnodes:
                self.cond.wait(0.5)
            failed = sorted({f for f in ended.values() if f})
            peers = list(self.peers)
        for peer in peers:
            peer.send({"op": "outcome", "attempt": attempt, "failed": failed})
        return failed

    def _stop_all(self, server: str, reason: str, attempt: int, source) -> None:
        with self.cond:
            if attempt in self.stops:
                return
            self.stops[attempt] = f"server {server}: {reason}"
            self.cond.notify_all()
            peers = [p for p in self.peers if p is not source]
        for peer in peers:
            peer.send({"op": "stop", "server": server, "reason": reason, "attempt": attempt})

    def _loop(self) -> None:
        while not self.closing:
            for key, _ in self.selector.select(timeout=0.2):
                if key.data is None:
                    self._accept()
                else:
                    self._receive(key.data)

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        peer = _Peer(sock)
        with self.cond:
            self.peers.append(peer)
        self.selector.register(sock, selectors.EVENT_READ, peer)
        peer.send({"op": "hello", "protocol": PROTOCOL})

    def _receive(self, peer: _Peer) -> None:
        try:
            messages = peer.read()
        except ValueError:
            messages = None  # not our protocol: drop the connection
        if messages is None:
            self.selector.unregister(peer.sock)
            peer.sock.close()
            with self.cond:
                self.peers.remove(peer)
                if peer.node is None or self.closing:
                    return
                if not peer.went:  # gone (Ctrl-C, killed) while it waited: it started nothing
                    self.joined.get(peer.joined, set()).discard(peer.node)
                    return
                if peer.said_bye:  # ended cleanly after an attempt: it joins no later one
                    self.left.add(peer.node)
                    self.cond.notify_all()
                    return
                server = f"node{peer.node}"
                # no later attempt can start without it (agree() would wait for it in vain)
                self.broken = self.broken or f"server {server}: its launcher is gone"
                self.vanished.append(server)
            attempt = self._current()
            self._stop_all(server, "its launcher is gone", attempt, peer)
            with self.cond:  # it will never report: its part of the job failed
                self.outcomes.setdefault(attempt, {}).setdefault(peer.node, server)
                self.cond.notify_all()
            return
        for message in messages:
            self._handle(peer, message)

    def _current(self) -> int:
        with self.cond:
            return max(self.joined, default=0)

    def _handle(self, peer: _Peer, message: dict) -> None:
        op = message.get("op")
        if op == "join":
            node, attempt = int(message.get("node", -1)), int(message.get("attempt", 0))
            if int(message.get("nnodes", self.nnodes)) != self.nnodes:
                peer.send({"op": "refused", "reason": f"node 0 runs --nnodes {self.nnodes}, "
                           f"this launcher {message.get('nnodes')}"})
                return
            with self.cond:
                # a second launcher of one --node-rank would start the same ranks again
                if any(p.node == node for p in self.peers if p is not peer):
                    refused = (f"another launcher already joined as --node-rank {node}: every "
                               f"server needs its own --node-rank (1..{self.nnodes - 1} besides "
                               "node 0)")
                else:
                    refused = ""
                    peer.node, peer.joined = node, attempt
                    self.joined.setdefault(attempt, set()).add(node)
                    self.cond.notify_all()
            if refused:
                peer.send({"op": "refused", "reason": refused})
        elif op == "failed":
            self._stop_all(str(message.get("server")), str(message.get("reason")),
                           int(message.get("attempt", 0)), peer)
        elif op == "ended":
            with self.cond:
                self.outcomes.setdefault(int(message["attempt"]), {})[peer.node] = (
                    "" if message.get("ok") else str(message.get("server")))
                self.cond.notify_all()
        elif op == "bye":
            peer.said_bye = True

    def close(self) -> None:
        with self.cond:
            peers = list(self.peers)
        for peer in peers:
            peer.send({"op": "bye"})
        self.closing = True
        if self.thread is not None:
            self.thread.join(2)
        for key in list(self.selector.get_map().values()):
            cast(socket.socket, key.fileobj).close()
        self.selector.close()


class Spoke(_Linked):
    """Node >= 1: joins node 0 and learns the job id from it; hears stop requests."""

    def __init__(self, addr: str, port: int, node: int, nnodes: int, server: str, *,
                 key: bytes | None, note=None, silence_s: float = 60.0):
        super().__init__()
        self.node, self.nnodes, self.server, self.note = node, nnodes, server, note
        self.goes: dict[int, dict[str, str]] = {}
        self.refused = ""
        sock, rest = dial(addr, port, note)
        self.peer = _Peer(sock)
        self.peer.buffer = rest  # what node 0 sent after its greeting (nothing, so far)
        self._start_reader(self._loop)

    def agree(self, identity: dict[str, str], attempt: int) -> dict[str, str]:
        self.peer.send({"op": "join", "node": self.node, "server": self.server,
                        "attempt": attempt, "nnodes": self.nnodes})
        deadline, waiting = time.monotonic() + join_timeout(), WaitNote(self.note)
        with self.cond:
            while attempt not in self.goes:
                if self.refused:
                    raise PlatformPluginError(f"node 0 refused this launcher: {self.refused}")
                if self.broken:
                    raise PlatformPluginError(f"multi-server start failed: {self.broken}")
                if self.peer.said_bye:  # it closed cleanly without starting this attempt
                    raise PlatformPluginError(
                        "node 0's launcher ended without starting " +
                        ("the job" if attempt == 0 else f"attempt {attempt + 1}") +
                        " (interrupted, or it failed or decided not to restart: its output says)")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PlatformPluginError(f"node 0 did not start the job within "
                                              f"{join_timeout():g}s (other nodes missing?)")
                waiting.check(lambda: "joined node 0; waiting for it to start "
                                      + (f"attempt {attempt + 1}" if attempt else "the job")
                                      + " (once every server's launcher has joined; up to "
                                      f"{join_timeout():g}s)")
                self.cond.wait(min(left, 0.5))
            return self.goes[attempt]

    def tell_failed(self, server: str, reason: str, attempt: int) -> None:
        with self.cond:
            self.stops.setdefault(attempt, f"server {server}: {reason}")
        self.peer.send({"op": "failed", "server": server, "reason": reason, "attempt": attempt})

    def gone(self) -> list[str]:
        with self.cond:
            return ["node0"] if self.broken else []

    def conclude(self, attempt: int, ok: bool, server: str) -> list[str]:
        self.peer.send({"op": "ended", "attempt": attempt, "ok": ok, "server": server})
        with self.cond:
            while attempt not in self.outcomes:
                if self.broken:  # node 0 gone: its part of the job is lost
                    return sorted({"node0"} | (set() if ok else {server}))
                self.cond.wait(0.5)
            return list(self.outcomes[attempt]["failed"])

    def _loop(self) -> None:
        self.peer.sock.settimeout(0.2)
        while not self.closing:
            try:
                messages = self.peer.read()
            except ValueError:
                messages = None
            if messages is None:
                with self.cond:
                    if not self.closing and not self.peer.said_bye:
                        self.broken = "node 0's launcher is gone"
                    self.cond.notify_all()
                return
            with self.cond:
                for message in messages:
                    op = message.get("op")
                    if op == "go":
                        self.goes[int(message["attempt"])] = dict(message["identity"])
                    elif op == "stop":
                        self.stops.setdefault(int(message["attempt"]),
                                              f"server {message.get('server')}: "
                                              f"{message.get('reason')}")
                    elif op == "refused":
                        self.refused = str(message.get("reason"))
                    elif op == "outcome":
                        self.outcomes[int(message["attempt"])] = message
                    elif op == "bye":
                        self.peer.said_bye = True
                self.cond.notify_all()

    def close(self) -> None:
        self.closing = True
        self.peer.send({"op": "bye"})
        if self.thread is not None:
            self.thread.join(2)
        self.peer.sock.close()
