"""Junk, forged and outside messages sent to node 0's control port (`--master-port + 1`) of a
running 2-server job: real `platform-run launch` processes on loopback, tiny ranks, and the
test as the hostile party (raw TCP and a ZeroMQ peer of its own). The job neither stops,
starts early, crashes nor hangs; no traceback; exit 0."""
from __future__ import annotations

import json
import os
import selectors
import socket
import time

import psutil
import pytest
import zmq

from platform_plugin.launcher.servers.wire import Wire
from tests.helpers import wait_for
from tests.launcher.helpers import (ASSETS, PY, finish_all, free_port_pair, kill_jobs, log_text,
                                    start_cli)
from tests.launcher.test_joblink_wire import HOSTILE

RANK = str(ASSETS / "server_rank.py")
pytestmark = pytest.mark.slow


def start(tmp_path, port, node, flag, extra=(), env=None):
    log_dir = tmp_path / f"server{node}"
    log_dir.mkdir(exist_ok=True)
    return start_cli(["--nproc", "1", "--nnodes", "2", "--node-rank", str(node),
                      "--master-port", str(port), "--backend", "plain", "--show", "none",
                      *extra, "--", PY, RANK, "until", str(flag)], log_dir, cwd=str(tmp_path),
                     env=env)


def listening(proc, port) -> bool:
    return any(c.laddr.port == port and c.status == "LISTEN"
               for c in psutil.Process(proc.pid).net_connections("tcp"))


def ranks_running(tmp_path) -> bool:
    return all(any("ENV " in log_text(str(d), str(node)) for d in (tmp_path / f"server{node}")
                   .iterdir() if not d.name.startswith("."))
               for node in (0, 1))


def raw(port: int, data: bytes) -> None:
    """Bytes on a plain TCP connection, then closed (not ZeroMQ: libzmq's handshake fails)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass  # closed by node 0 first (a 20 MB blob)


def as_zeromq(port: int, key: bytes | None) -> None:
    """Every hostile payload as ZeroMQ messages (no signature, a false one, one frame, five),
    a 20 MB frame, and the well-formed flow of an outsider: greet, then a forged `failed`, a
    `join` as node 99, an `ended` it has no part in."""
    context = zmq.Context()
    try:
        for payload in HOSTILE:
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 2000)
            sock.connect(f"tcp://127.0.0.1:{port}")
            for frames in ([b"", payload], [b"f" * 64, payload], [payload], [b""] * 5):
                sock.send_multipart(frames)
            sock.close()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send(b"x" * 20_000_000)
        sock.close()
        outsider = Wire(key)
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send_multipart(outsider.pack("hello", protocol=2))
        to = json.loads(sock.recv_multipart()[1])["sid"] if sock.poll(5000) else "0" * 32
        sock.send_multipart(outsider.pack("failed", to=to, server="node1", reason="forged",
                                          attempt=1))
        sock.send_multipart(outsider.pack("join", to=to, node=99, server="x", attempt=1,
                                          nnodes=2))
        sock.send_multipart(outsider.pack("ended", to=to, attempt=1, ok=False, server="node1"))
        sock.close()
    finally:
        context.term()


def flood(port: int, count: int, within: float) -> tuple[list[socket.socket], int]:
    """`count` TCP connections opened at once and held idle; how many the kernel completed."""
    socks, selector = [], selectors.DefaultSelector()
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        socks.append(sock)
        selector.register(sock, selectors.EVENT_WRITE)
    established, deadline = 0, time.monotonic() + within
    while selector.get_map() and time.monotonic() < deadline:
        for key, _ in selector.select(0.5):
            selector.unregister(key.fileobj)
            established += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    selector.close()
    return socks, established


def attack(port: int, key: bytes | None) -> None:
    for payload in HOSTILE:
        raw(port, payload + b"\n")
    raw(port, os.urandom(4096))
    raw(port, b"x" * 20_000_000)
    as_zeromq(port, key)


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_hostile_messages_to_node_0_neither_stop_nor_start_the_job(tmp_path, signed):
    """Before node 1 joined (a `join` as node 99 must not start the job) and while the ranks
    run (a forged `failed` must not stop it; 2,000 idle connections must not take node 0's
    descriptors). Unsigned: the job has no key, the schema and the join rules refuse; signed:
    PLATFORM_JOB_KEY on both, the outsider signs with another key."""
    port, flag = free_port_pair(), tmp_path / "go-on"
    # (the key through the environment, as a team would give it: not on the command line)
    env = {**os.environ, "PLATFORM_JOB_KEY": "the-jobs-key"} if signed else None
    outsider_key = b"another key" if signed else None
    node0 = start(tmp_path, port, 0, flag, env=env)
    procs = [node0]
    idle: list[socket.socket] = []  # (closed at the end)
    try:
        wait_for(lambda: listening(node0, port + 1), 60, what="node 0 listens")
        attack(port + 1, outsider_key)
        time.sleep(1)
        assert node0.poll() is None
        assert not [d for d in (tmp_path / "server0").iterdir() if not d.name.startswith(".")]
        procs.append(start(tmp_path, port, 1, flag, env=env))
        wait_for(lambda: ranks_running(tmp_path), 90, what="both servers' ranks run")
        attack(port + 1, outsider_key)
        idle, established = flood(port + 1, 2000, within=60)
        assert established == 2000
        time.sleep(2)
        held = psutil.Process(node0.pid).num_fds()
        assert held < 1000, f"node 0 holds {held} descriptors with 2,000 idle connections"
        assert all(proc.poll() is None for proc in procs)
    finally:
        for sock in idle:
            sock.close()
        flag.touch()
        outs = finish_all(procs, timeout=90)
        kill_jobs([tmp_path / "server0", tmp_path / "server1"])
    assert [code for code, _ in outs] == [0, 0], outs
    assert not any("Traceback" in out for _, out in outs), outs
    said = [line for line in outs[0][1].splitlines() if "job link refused" in line]
    assert said and len(said) <= 20, outs[0][1]
    if signed:
        assert any("bad signature" in line for line in said), said
        # the key is the launchers' alone: never printed, never in a rank's environment
        assert not any("the-jobs-key" in out for _, out in outs)
        for node in (0, 1):
            [job_dir] = [d for d in (tmp_path / f"server{node}").iterdir()
                         if not d.name.startswith(".")]
            assert "ENV " in log_text(str(job_dir), str(node))
            assert "the-jobs-key" not in log_text(str(job_dir), str(node))
