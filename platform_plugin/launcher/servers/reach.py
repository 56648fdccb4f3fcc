"""How a launcher of node >= 1 reaches node 0's control port (`--master-port + 1`): it retries
until node 0 listens (the start order does not matter), never keeps a connection to itself,
and insists on ZeroMQ's greeting (then, in spoke.py, on node 0's welcome), so another program
on that port is named at once.
"""
from __future__ import annotations

import errno
import socket
import time
from typing import Callable

from platform_plugin.errors import ConfigError, PlatformPluginError, Problem
from platform_plugin.variables import PLATFORM_RENDEZVOUS_TIMEOUT

ZMTP_SIGNATURE = b"\xff" + bytes(8) + b"\x7f"  # how every ZeroMQ peer (ZMTP 3) begins
HELLO_S = 15.0  # libzmq greets at once, node 0's link welcomes at once: for a loaded machine
NOTE_AFTER_S = 2.0  # a wait this long is said once (the launchers of a normal start meet sooner)


def join_timeout() -> float:
    """How long the launchers wait for each other at the start (node 0 for the others to join,
    the others for node 0 to listen): PLATFORM_RENDEZVOUS_TIMEOUT, default 300 s."""
    return PLATFORM_RENDEZVOUS_TIMEOUT.get()


class WaitNote:
    """Says `text()` once, when a wait has lasted NOTE_AFTER_S: a launcher may wait for the
    others up to PLATFORM_RENDEZVOUS_TIMEOUT (300 s), and its user must know why."""

    def __init__(self, note: Callable[[str], None] | None) -> None:
        self.note, self.since = note, time.monotonic()

    def check(self, text: Callable[[], str]) -> None:
        if self.note is not None and time.monotonic() - self.since >= NOTE_AFTER_S:
            note, self.note = self.note, None
            note(text())


def ipv4_of(addr: str) -> str:
    """The IPv4 address ZeroMQ binds or connects for `addr` (a name is resolved here:
    socket.gaierror when it does not resolve, as open_link reports it)."""
    return str(socket.getaddrinfo(addr, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])


def port_flag(table: bool) -> str:
    """The setting that chooses node 0's control port: `--master-port` (+ 1) on the `--nnodes`
    route, `--control-port` on the rank-table route (the table has no rendezvous port)."""
    return "--control-port" if table else "--master-port"


def reach(addr: str, port: int, note: Callable[[str], None] | None = None,
          table: bool = False) -> None:
    """Returns once a ZeroMQ socket listens on node 0's control port (checked on a plain TCP
    connection of its own, closed again; the link's own connection is ZeroMQ's)."""
    timeout = join_timeout()
    deadline = time.monotonic() + timeout
    waiting = WaitNote(note)
    while True:
        sock = _connect(addr, port, deadline, timeout, waiting, table)
        try:
            zeromq = _greeting(sock, addr, port, table)
        finally:
            sock.close()
        if zeromq:
            return
        # closed before a word: node 0 ending (or starting again); call again
        if time.monotonic() > deadline:
            raise PlatformPluginError(
                f"what listens on {addr}:{port} ({_named(table)}) closed every connection "
                f"without a word for {timeout:g}s: node 0's launcher greets at once; is another "
                "program on that port? (PLATFORM_RENDEZVOUS_TIMEOUT sets the wait)")
        time.sleep(0.2)


def _connect(addr: str, port: int, deadline: float, timeout: float,
             waiting: WaitNote, table: bool) -> socket.socket:
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=2)
            if sock.getsockname() != sock.getpeername():
                return sock
            # nobody listens yet and the kernel gave this socket the very port it calls (a
            # --master-port in the ephemeral range): TCP connects it to itself, it would wait
            # for its own "go" and hold the port node 0 is about to listen on
            sock.close()
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        except OSError as exc:
            if time.monotonic() > deadline:
                raise PlatformPluginError(
                    f"cannot reach node 0's launcher at {addr}:{port} ({exc.strerror or exc}) "
                    f"within {timeout:g}s: " + ("start the table's first server with the same "
                    "table and --control-port" if table else "start node 0 with the same "
                    "--master-addr and --master-port") + " (PLATFORM_RENDEZVOUS_TIMEOUT sets the "
                    "wait)") from None
            waiting.check(lambda: f"waiting for node 0's launcher at {addr}:{port} "
                                  f"({exc.strerror or exc}; up to {timeout:g}s, "
                                  "PLATFORM_RENDEZVOUS_TIMEOUT)")
            time.sleep(0.2)


def _greeting(sock: socket.socket, addr: str, port: int, table: bool) -> bool:
    """True when the peer greets as ZeroMQ does (ZMTP 3: a 10-byte signature, 0xFF ... 0x7F,
    sent at once on accept); False when it closed before a word. Another program on node 0's
    port (an HTTP server, a leftover process) would never finish ZeroMQ's handshake: without
    this the launcher would wait PLATFORM_RENDEZVOUS_TIMEOUT (300 s) for node 0's welcome."""
    deadline, data = time.monotonic() + HELLO_S, b""
    sock.sendall(ZMTP_SIGNATURE)
    while len(data) < len(ZMTP_SIGNATURE) and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(len(ZMTP_SIGNATURE) - len(data))
        except socket.timeout:
            break
        except OSError:
            chunk = b""
        if not chunk:
            if not data:
                return False
            break
        data += chunk
    if data[:1] == b"\xff" and data[9:10] == b"\x7f":
        return True
    try:  # the rest of its first line, to name it
        sock.settimeout(0.5)
        data += sock.recv(80)
    except OSError:
        pass
    said = repr(data.split(b"\n")[0][:80].decode(errors="replace")) if data else "nothing"
    raise busy(addr, port, f"it said {said} within {HELLO_S:g}s", table)


def _named(table: bool) -> str:
    return "--control-port / PLATFORM_CONTROL_PORT" if table else "--master-port + 1"


def busy(addr: str, port: int, what: str, table: bool = False) -> ConfigError:
    """LAUNCH_PORT_BUSY: what answers on node 0's control port is not node 0's launcher; the
    refusal names the setting of the route (`port_flag`)."""
    flag = port_flag(table)
    return ConfigError([Problem(
        "LAUNCH_PORT_BUSY", f"what listens on {addr}:{port} ({_named(table)}, the launchers' "
        f"control port) is not {'the first server' if table else 'node 0'}'s launcher: {what}. "
        f"Another program holds that port there: stop it, or choose another {flag} on every "
        "server", flag)])
