"""util/ports.free_port: real binds on loopback."""
from __future__ import annotations

import socket

from platform_plugin.util import ports


def test_a_chosen_port_lies_below_the_ephemeral_range_and_binds():
    """Below the range no other process's outgoing connection can be given the port before the
    server binds it, nor a retrying client connect to itself (it used to be bind(0)'s port, in
    the range: the multi-server tests' launchers lost their ports that way under load)."""
    end = min(ports.CHOSEN_PORTS[1], ports._ephemeral_low())
    chosen = {ports.free_port() for _ in range(40)}
    assert all(ports.CHOSEN_PORTS[0] <= port < end for port in chosen), chosen
    assert len(chosen) > 20  # spread over the window, not one port handed to every caller
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", chosen.pop()))


def test_without_room_below_the_range_the_kernel_chooses(monkeypatch):
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: 1024)
    port = ports.free_port()
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = map(int, f.read().split())
    assert low <= port <= high
