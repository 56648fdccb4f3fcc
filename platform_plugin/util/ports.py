"""Ports on this machine: pick a free one (rendezvous, a local MLflow server), or check that a
requested one is free."""
from __future__ import annotations

from platform_plugin.errors import ConfigError, Problem


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now. Another process may take it before the rank binds it;
    the window is milliseconds, and a clash shows up as the scheduler/rank 0 failing to bind."""
    import socket  # here, as below: a job that needs no port starts without the socket module
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_free(port: int, host: str = "127.0.0.1", *, what: str = "port") -> None:
    """Raise ConfigError (LAUNCH_PORT_BUSY) when `port` cannot be bound on `host`."""
    import socket
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
