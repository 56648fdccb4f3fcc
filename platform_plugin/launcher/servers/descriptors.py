"""The TCP connections libzmq holds for node 0's ROUTER, seen through their descriptors (the
socket's monitor and ZMQ_SRCFD name them): how many the hub keeps, which connection a
descriptor holds now, and how to make libzmq close one (hub.py).
"""
from __future__ import annotations

import os
import resource
import socket

MAX_CONNECTIONS = 256  # beyond the job's nodes: what junk may hold open at once


def connection_cap(nnodes: int) -> int:
    """How many connections node 0 keeps: the job's launchers and MAX_CONNECTIONS more, and
    never more than a quarter of this process's descriptor limit (the ranks' pipes and the
    job's files need the rest; libzmq retries a failed accept in a loop at the limit)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = soft // 4 if soft != resource.RLIM_INFINITY else MAX_CONNECTIONS + nnodes
    return max(nnodes + 8, min(MAX_CONNECTIONS + nnodes, room))


def shut(fd: int, port: int) -> None:
    """Shut a connection libzmq holds down: libzmq then sees its end and closes it. Only a TCP
    connection accepted on `port`: an event read late may name a descriptor reused since."""
    try:
        with socket.socket(fileno=os.dup(fd)) as conn:
            if conn.type == socket.SOCK_STREAM and conn.getsockname()[1] == port:
                conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # closed meanwhile, or not a socket


TCP_ESTABLISHED = 1  # Linux's tcp_info.tcpi_state of an open connection


def peer_address(fd: int) -> object:
    """The peer address of the open connection on descriptor `fd`, None once it is closing or
    closed: two connections that use one descriptor one after the other have different ones.
    (libzmq reports a disconnect just before it closes the descriptor: a connection whose peer
    has gone is no longer ESTABLISHED then.)"""
    try:
        with socket.socket(fileno=os.dup(fd)) as conn:
            if hasattr(socket, "TCP_INFO") and conn.getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != TCP_ESTABLISHED:
                return None
            return conn.getpeername()
    except OSError:
        return None
