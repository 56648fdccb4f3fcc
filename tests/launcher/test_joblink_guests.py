"""Guests on node 0's control port of a job without a key, and a node given another job id:
real `platform-run launch` processes on loopback, tiny ranks, the test as the outsider (ZeroMQ
peers that greet and keep pinging, never joining)."""
from __future__ import annotations

import os
import threading

import pytest
import zmq

from platform_plugin.launcher.servers.hub import MAX_GUESTS
from platform_plugin.launcher.servers.wire import FROM_NODE_0, Wire
from tests.helpers import wait_for
from tests.launcher.helpers import finish_all, free_port_pair, kill_jobs
from tests.launcher.test_joblink_hostile import listening, ranks_running, start

pytestmark = pytest.mark.slow


class Guests:
    """`count` ZeroMQ peers that greet node 0 and then ping it every 0.3 s until stopped: what
    locked the real node 1 out once MAX_GUESTS of them waited."""

    def __init__(self, port: int, count: int):
        self.context = zmq.Context()
        self.guests: list = []  # (socket, its own Wire: a session and a counter each)
        for _ in range(count):
            sock = self.context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"tcp://127.0.0.1:{port}")
            wire = Wire(None)
            sock.send_multipart(wire.pack("hello", protocol=2))
            self.guests.append((sock, wire))
        self.sids = {}
        for sock, wire in self.guests:
            if sock.poll(5000):
                message, _why = wire.unpack(sock.recv_multipart(), FROM_NODE_0)
                if message is not None and message["op"] == "welcome":
                    self.sids[sock] = (wire, message["sid"])
        self.welcomed = len(self.sids)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._ping, daemon=True)
        self.thread.start()

    def _ping(self) -> None:
        while not self.done.wait(0.3):
            for sock, (wire, sid) in self.sids.items():
                try:
                    sock.send_multipart(wire.pack("ping", to=sid), zmq.NOBLOCK)
                    while sock.poll(0):
                        sock.recv_multipart()
                except zmq.ZMQError:
                    pass

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
        for sock, _wire in self.guests:
            sock.close()
        self.context.term()


def test_greeted_guests_that_keep_pinging_never_lock_the_real_node_out(tmp_path):
    """A job without a key: MAX_GUESTS + 6 outsiders greet node 0 and keep pinging. Node 1 was
    not welcomed and exited 2 ("is not node 0's launcher"); now the newest greeting is welcomed
    (the guest that greeted first is dropped) and a guest that does not join is dropped after
    GUEST_JOIN_S: the job runs on both servers and ends 0."""
    port, flag = free_port_pair(), tmp_path / "go-on"
    node0 = start(tmp_path, port, 0, flag)
    procs, guests = [node0], None
    try:
        wait_for(lambda: listening(node0, port + 1), 60, what="node 0 listens")
        guests = Guests(port + 1, MAX_GUESTS + 6)
        assert guests.welcomed >= MAX_GUESTS  # they did take every guest's place
        procs.append(start(tmp_path, port, 1, flag))
        wait_for(lambda: ranks_running(tmp_path), 90, what="both servers' ranks run")
    finally:
        if guests is not None:
            guests.stop()
        flag.touch()
        outs = finish_all(procs, timeout=90)
        kill_jobs([tmp_path / "server0", tmp_path / "server1"])
    assert [code for code, _ in outs] == [0, 0], outs
    assert not any("Traceback" in out for _, out in outs), outs
    assert "greeted without joining" in outs[0][1] or "did not join" in outs[0][1], outs[0][1]


def test_a_node_given_another_job_id_says_it_joins_node_0s_job(tmp_path):
    """With a key, node 1 given another --job-id joined node 0's job in silence: it says so
    (the job keeps node 0's id: one id per job) and the job runs."""
    port, flag = free_port_pair(), tmp_path / "go-on"
    env = {**os.environ, "PLATFORM_JOB_KEY": "the-jobs-key"}
    procs = [start(tmp_path, port, 0, flag, extra=("--job-id", "job-a"), env=env)]
    try:
        procs.append(start(tmp_path, port, 1, flag, extra=("--job-id", "job-b"), env=env))
        wait_for(lambda: ranks_running(tmp_path), 90, what="both servers' ranks run")
    finally:
        flag.touch()
        outs = finish_all(procs, timeout=90)
        kill_jobs([tmp_path / "server0", tmp_path / "server1"])
    assert [code for code, _ in outs] == [0, 0], outs
    assert "'job-b' here, but node 0 runs the job as 'job-a'" in outs[1][1], outs[1][1]
    assert [d.name for d in (tmp_path / "server1").iterdir()
            if not d.name.startswith(".")] == ["job-a"]
