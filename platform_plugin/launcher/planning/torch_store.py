"""The torch backend's rendezvous store, hosted by a helper process bound to MASTER_ADDR only.

torch's env:// rendezvous makes rank 0 host a TCPStore, and TCPStore's server listens on every
interface (`::`/0.0.0.0) whatever MASTER_ADDR says, without authentication: anyone who
reaches the port can read and write the job's keys. torchrun avoids a store in rank 0 by
hosting it in its agent and setting TORCHELASTIC_USE_AGENT_STORE=True, which turns every rank
into a client. The launcher does the same with this helper: it binds a socket to MASTER_ADDR
(127.0.0.1 for a single-server job) and hands it to TCPStore(master_listen_fd=...), so the
store is reachable on that address only. It runs with the ranks' own interpreter (torch is
there) and ends with exit 0 on SIGTERM, which the supervisor sends once the workers are done.
"""
from __future__ import annotations

import os
import sys

ROLE = "service"  # RankSpec.role: not a rank; stopped when the workers are done
NAME = "store"
AGENT_STORE = {"TORCHELASTIC_USE_AGENT_STORE": "True"}

_PROGRAM = r"""
import datetime, os, signal, socket, sys
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
from torch.distributed import TCPStore
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
family = socket.getaddrinfo(addr, port, 0, socket.SOCK_STREAM)[0][0]
sock = socket.socket(family, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    sock.bind((addr, port))
except OSError as exc:
    sys.exit(f"rendezvous store: cannot listen on {addr}:{port}: {exc.strerror}")
sock.listen(1024)
store = TCPStore(addr, port, is_master=True, master_listen_fd=sock.fileno(),
                 wait_for_workers=False, timeout=datetime.timedelta(minutes=30))
print(f"rendezvous store listening on {addr}:{port} only", flush=True)
while True:
    signal.pause()
"""


def interpreter(command: tuple[str, ...] | list[str]) -> str:
    """The ranks' python (it has torch), else this one."""
    first = command[0] if command else ""
    return first if os.path.basename(first).startswith("python") else sys.executable


def argv(command: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return (interpreter(command), "-c", _PROGRAM)
