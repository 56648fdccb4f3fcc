"""How a node >= 1 launcher reaches node 0's control port: real sockets on loopback, the Hub and
the Spoke of launcher/servers/link_protocol.py in this process (the launchers around them are in
test_multiserver.py)."""
from __future__ import annotations

import socket
import threading

import pytest

from platform_plugin.errors import ConfigError, PlatformPluginError
from platform_plugin.launcher.servers import reach
from platform_plugin.launcher.servers.hub import Hub
from platform_plugin.launcher.servers.spoke import Spoke
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
    would keep it: it would greet itself and wait for a "go" until
    PLATFORM_RENDEZVOUS_TIMEOUT, holding the port node 0 is about to listen on."""
    monkeypatch.setenv("PLATFORM_RENDEZVOUS_TIMEOUT", "20")
    port = free_port_pair()
    hub = Hub("127.0.0.1", port, 2, key=None)
    real, calls = socket.create_connection, []

    def create_connection(address, *args, **kwargs):
        calls.append(address)
        return self_connected() if len(calls) == 1 else real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    spoke = Spoke("127.0.0.1", port, 1, 2, "node1", key=None)
    try:
        assert len(calls) == 2, calls  # the self-connection was dropped, node 0 called again
        hub_said = []
        agreeing = threading.Thread(
            target=lambda: hub_said.append(hub.agree({"job_id": "job-7"}, 1)))
        agreeing.start()
        # node 0's identity, through the real link
        assert spoke.agree({"job_id": "job-0"}, 1) == {"job_id": "job-7"}
        agreeing.join(20)
        assert hub_said == [{"job_id": "job-7"}]
    finally:
        spoke.close()
        hub.close()


class Squatter:
    """Another program's listener on the control port: it accepts, then says `banner` (or
    nothing) and keeps the connection, or closes it at once (`close`)."""

    def __init__(self, port: int, banner: bytes = b"", close: bool = False):
        self.listener = socket.create_server(("127.0.0.1", port))
        self.banner, self.close_at_once, self.held = banner, close, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.banner:
                conn.sendall(self.banner)
            if self.close_at_once:
                conn.close()
            else:
                self.held.append(conn)

    def stop(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("banner, said", [
    (b"", "it said nothing within 1s"),
    (b"SSH-2.0-OpenSSH_9.2\r\n", "it said 'SSH-2.0-OpenSSH_9.2\\r'"),
    (b'{"jsonrpc": "2.0"}\n', "it said '{\"jsonrpc\": \"2.0\"}'"),
])
def test_another_program_on_the_control_port_is_named_at_once(monkeypatch, banner, said):
    """It would take the join and never answer: the launcher would wait
    PLATFORM_RENDEZVOUS_TIMEOUT (300 s) for a "go". ZeroMQ's greeting is missing within HELLO_S
    (1 s here): named."""
    monkeypatch.setenv("PLATFORM_RENDEZVOUS_TIMEOUT", "60")
    monkeypatch.setattr(reach, "HELLO_S", 1.0)
    port = free_port_pair()
    squatter = Squatter(port, banner)
    try:
        with pytest.raises(ConfigError) as refused:
            Spoke("127.0.0.1", port, 1, 2, "node1", key=None).close()
    finally:
        squatter.stop()
    [problem] = refused.value.problems
    assert problem.code == "LAUNCH_PORT_BUSY" and "not node 0's launcher" in problem.message
    assert said in problem.message, problem.message


def test_on_the_rank_table_route_the_refusal_names_the_control_port(monkeypatch):
    """The rank table has no rendezvous port: node 0's control port is --control-port
    (PLATFORM_CONTROL_PORT). The refusal named --master-port, a flag that route does not use."""
    monkeypatch.setenv("PLATFORM_RENDEZVOUS_TIMEOUT", "60")
    monkeypatch.setattr(reach, "HELLO_S", 1.0)
    port = free_port_pair()
    squatter = Squatter(port, b"SSH-2.0-OpenSSH_9.2\r\n")
    try:
        with pytest.raises(ConfigError) as refused:
            Spoke("127.0.0.1", port, 1, 2, "10.0.0.2", key=None, hub_server="10.0.0.1").close()
    finally:
        squatter.stop()
    [problem] = refused.value.problems
    assert problem.code == "LAUNCH_PORT_BUSY" and problem.path == "--control-port"
    assert "--control-port" in problem.message and "--master-port" not in problem.message
    assert "the first server's launcher" in problem.message, problem.message


def test_a_port_that_closes_every_connection_is_retried_until_the_rendezvous_timeout(
        monkeypatch):
    """A connection closed before a word may be node 0 ending or starting again: called again,
    until PLATFORM_RENDEZVOUS_TIMEOUT (2 s here), then named - not a loop for good."""
    monkeypatch.setenv("PLATFORM_RENDEZVOUS_TIMEOUT", "2")
    port = free_port_pair()
    squatter = Squatter(port, close=True)
    try:
        with pytest.raises(PlatformPluginError, match="closed every connection without a word"):
            Spoke("127.0.0.1", port, 1, 2, "node1", key=None).close()
    finally:
        squatter.stop()
