"""Ports on this machine: pick a free one (rendezvous, a local MLflow server), or check that a
requested one is free."""
from __future__ import annotations

import os
import socket

from platform_plugin.errors import ConfigError, Problem


# Where free_port looks first: below the kernel's ephemeral range, so no outgoing connection of
# any process (an MLflow client, a browser) can be given the port before our server binds it,
# and a client retrying while nobody listens yet can never connect to itself (TCP's
# simultaneous open, when its own ephemeral port is the destination). Below 28000: clear of
# torch's default 29500 and Kubernetes' NodePort range (30000-32767).
CHOSEN_PORTS = (15000, 28000)


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now, outside the ephemeral range when there is room for one.
    Another process may take it before the rank binds it; the window is milliseconds, and a
    clash shows up as the scheduler/rank 0 failing to bind."""
    first, end = CHOSEN_PORTS[0], min(CHOSEN_PORTS[1], _ephemeral_low())
    if end - first >= 1000:
        for _ in range(64):
            port = first + int.from_bytes(os.urandom(2), "little") % (end - first)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue  # held (a server, a TIME_WAIT of ours): another one
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))  # no room below the ephemeral range (or all taken): the kernel's
        return sock.getsockname()[1]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def check_free(port: int, host: str = "127.0.0.1", *, what: str = "port") -> None:
    """Raise ConfigError (LAUNCH_PORT_BUSY) when `port` cannot be bound on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError([Problem(
                "LAUNCH_PORT_BUSY",
                f"{what} {port} on {host} is in use ({exc.strerror}); stop the process holding it "
                f"(an earlier job?) or leave the port out so a free one is chosen",
                what)]) from None
