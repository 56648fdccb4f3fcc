"""How a launcher of node >= 1 reaches node 0's control port (`--master-port + 1`): it retries
until node 0 listens (the start order does not matter), never keeps a connection to itself,
and insists on node 0's greeting, so another program on that port is named at once.
"""
from __future__ import annotations

import errno
import json
import socket
import time

from platform_plugin.errors import ConfigError, PlatformPluginError, Problem
from platform_plugin.variables import PLATFORM_RENDEZVOUS_TIMEOUT

PROTOCOL = 1  # in node 0's greeting, its first line: {"op": "hello", "protocol": PROTOCOL}
HELLO_S = 15.0  # node 0's reader thread greets at once; this only allows for a loaded machine
NOTE_AFTER_S = 2.0  # a wait this long is said once (the launchers of a normal start meet sooner)


def join_timeout() -> float:
    """How long the launchers wait for each other at the start (node 0 for the others to join,
    the others for node 0 to listen): PLATFORM_RENDEZVOUS_TIMEOUT, default 300 s."""
    return PLATFORM_RENDEZVOUS_TIMEOUT.get()


class WaitNote:
    """Says `text()` once, when a wait has lasted NOTE_AFTER_S: a launcher may wait for the
    others up to PLATFORM_RENDEZVOUS_TIMEOUT (300 s), and its user must know why."""

    def __init__(self, note) -> None:
        self.note, self.since = note, time.monotonic()

    def check(self, text) -> None:
        if self.note is not None and time.monotonic() - self.since >= NOTE_AFTER_S:
            note, self.note = self.note, None
            note(text())


def dial(addr: str, port: int, note=None) -> tuple[socket.socket, bytes]:
    """A connection to node 0's launcher, greeted; and what it sent after the greeting."""
    timeout = join_timeout()
    deadline = time.monotonic() + timeout
    waiting = WaitNote(note)
    while True:
        sock = _connect(addr, port, deadline, timeout, waiting)
        try:
            rest = _greeting(sock, addr, port)
        except BaseException:
            sock.close()
            raise
        if rest is not None:
            return sock, rest
        sock.close()  # closed before a word: node 0 ending (or starting again); call again
        if time.monotonic() > deadline:
            raise PlatformPluginError(
                f"what listens on {addr}:{port} (--master-port + 1) closed every connection "
                f"without a word for {timeout:g}s: node 0's launcher greets at once; is another "
                "program on that port? (PLATFORM_RENDEZVOUS_TIMEOUT sets the wait)")
        time.sleep(0.2)


def _connect(addr: str, port: int, deadline: float, timeout: float,
             waiting: WaitNote) -> socket.socket:
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
                    f"within {timeout:g}s: start node 0 with the same --master-addr and "
                    "--master-port (PLATFORM_RENDEZVOUS_TIMEOUT sets the wait)") from None
            waiting.check(lambda: f"waiting for node 0's launcher at {addr}:{port} "
                                  f"({exc.strerror or exc}; up to {timeout:g}s, "
                                  "PLATFORM_RENDEZVOUS_TIMEOUT)")
            time.sleep(0.2)


def _greeting(sock: socket.socket, addr: str, port: int) -> bytes | None:
    """What node 0 sent after its hello; None when the connection closed before a word.
    Another program on node 0's port (an HTTP server, a leftover process) would take the join
    and never answer: without the greeting the launcher would wait PLATFORM_RENDEZVOUS_TIMEOUT
    (300 s) for a "go" that never comes."""
    deadline, data = time.monotonic() + HELLO_S, b""
    while b"\n" not in data and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            break
        except OSError:
            chunk = b""
        if not chunk:
            if not data:
                return None
            break
        data += chunk
    said = "nothing"
    line, _, rest = data.partition(b"\n")
    if line:
        try:
            first = json.loads(line)
        except ValueError:  # not JSON lines (binary, a banner): not a launcher
            first = None
        if isinstance(first, dict) and first.get("op") == "hello":
            return rest  # ("protocol" is there for a later version to tell versions apart)
        said = repr(line[:80].decode(errors="replace"))
    raise ConfigError([Problem(
        "LAUNCH_PORT_BUSY", f"what listens on {addr}:{port} (--master-port + 1, the launchers' "
        f"control port) is not node 0's launcher: it said {said} within {HELLO_S:g}s. Another "
        "program holds that port on node 0: stop it, or choose another --master-port on every "
        "server", "--master-port")])
