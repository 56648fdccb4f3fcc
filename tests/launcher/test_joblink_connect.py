"""How a node >= 1 launcher reaches node 0's control port: real sockets on loopback, the Hub and
the Spoke of launcher/joblink.py in this process (the launchers around them are in
test_multiserver.py)."""
from __future__ import annotations

import socket
import threading

from platform_plugin.launcher.joblink import Hub, Spoke
from tests.launcher.helpers import free_port_pair


def self_connected() -> socket.socket:
    """A real TCP connection to itself: what the kernel makes when a client's ephemeral port
    happens to be the port it calls and nobody listens there (simultaneous open)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.connect(sock.getsockname())
    return sock


def test_a_spoke_connected_to_itself_retries_until_node_0_answers(monkeypatch):
    """The first connect gives the Spoke a socket connected to itself (STAND-IN for the
    kernel's choice of ephemeral port, which no test can force on the real call). It used to
    keep it: it sent its join to itself and waited for a "go" until PLATFORM_RENDEZVOUS_TIMEOUT,
    holding the port node 0 was about to listen on."""
    monkeypatch.setenv("PLATFORM_RENDEZVOUS_TIMEOUT", "20")
    port = free_port_pair()
    hub = Hub("127.0.0.1", port, 2)
    real, calls = socket.create_connection, []

    def create_connection(address, *args, **kwargs):
        calls.append(address)
        return self_connected() if len(calls) == 1 else real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    spoke = Spoke("127.0.0.1", port, 1, 2, "node1")
    try:
        assert len(calls) == 2, calls  # the self-connection was dropped, node 0 called again
        assert spoke.peer.sock.getpeername() == ("127.0.0.1", port)
        hub_said = []
        agreeing = threading.Thread(target=lambda: hub_said.append(hub.agree("job-7", 0)))
        agreeing.start()
        assert spoke.agree("job-0", 0) == "job-7"  # node 0's job id, through the real link
        agreeing.join(20)
        assert hub_said == ["job-7"]
    finally:
        spoke.close()
        hub.close()
