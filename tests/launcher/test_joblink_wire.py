"""The job link's messages in this process: a real Hub and Spoke on loopback (ZeroMQ), and a
hostile ZeroMQ peer of the test's own. What a whole job does with the same messages:
test_joblink_hostile.py."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time

import pytest
import zmq

from platform_plugin.errors import ConfigError
from platform_plugin.launcher.servers.hub import Hub
from platform_plugin.launcher.servers.signing_key import signing_key
from platform_plugin.launcher.servers.spoke import Spoke
from platform_plugin.launcher.servers.wire import TO_NODE_0, Wire, valid_identity
from tests.helpers import wait_for
from tests.launcher.helpers import free_port_pair

KEY = b"k" * 32

# the payloads that each ended node 0's old JSON-lines link (a traceback, then a hang)
HOSTILE = [b'[1]', b'5', b'"x"', b'null', b'{"op":"ended"}', b'{"op":"join","node":"x"}',
           b'{"op":"join","node":null}', b'{"op":"join","node":1,"nnodes":"a"}',
           b'{"op":"failed","attempt":"a"}', b'[' * 200_000, b'{"op":"join","node":1e400}',
           b'{"op":"failed","server":"node1","reason":"forged","attempt":0}',
           b'{"op":"join","node":99,"server":"x","attempt":0,"nnodes":2}']


@pytest.mark.parametrize("payload", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("key", [None, KEY], ids=["unsigned", "signed"])
def test_every_hostile_payload_is_refused_by_the_checks(payload, key):
    """Signed by the job's own key where there is one: the schema refuses them all the same
    (a message that fails is never acted on, never raises)."""
    signature = hmac.new(key, payload, hashlib.sha256).hexdigest().encode() if key else b""
    message, why = Wire(key).unpack([signature, payload], TO_NODE_0)
    assert message is None and why, why


def test_a_forged_signature_and_another_session_are_refused():
    sender, receiver = Wire(KEY), Wire(KEY)
    frames = sender.pack("ping", to=receiver.sid)
    assert receiver.unpack(frames, TO_NODE_0)[0] is not None
    assert Wire(b"other").unpack(frames, TO_NODE_0)[1].startswith("bad signature")
    assert Wire(KEY).unpack(frames, TO_NODE_0)[1].startswith("replayed")  # another session
    assert receiver.unpack([b"0" * 64, frames[1]], TO_NODE_0)[1].startswith("bad signature")


class Peer:
    """A ZeroMQ DEALER of the test's own on node 0's port: what anyone on the network can do."""

    def __init__(self, port: int, key: bytes | None):
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://127.0.0.1:{port}")
        self.wire = Wire(key)

    def send(self, frames) -> None:
        self.sock.send_multipart(frames)

    def receive(self, timeout: float = 5.0):
        if not self.sock.poll(int(timeout * 1000)):
            return None
        return self.sock.recv_multipart()

    def close(self) -> None:
        self.sock.close(0)
        self.context.term()


@pytest.fixture
def linked(monkeypatch):
    """Node 0's Hub and node 1's Spoke of a 2-server job, joined and told "go"; the frames the
    Spoke sent up to "go", recorded as they were made (Wire.pack wrapped: the bytes still go
    out)."""
    monkeypatch.setenv("PLATFORM_RENDEZVOUS_TIMEOUT", "20")
    port = free_port_pair()
    notes: list[str] = []
    packed: list[list[bytes]] = []
    pack = Wire.pack
    monkeypatch.setattr(Wire, "pack", lambda *a, **kw: packed.append(pack(*a, **kw)) or packed[-1])
    hub = Hub("127.0.0.1", port, 2, key=KEY, note=notes.append, silence_s=10)
    spoke = Spoke("127.0.0.1", port, 1, 2, "node1", key=KEY, silence_s=10)
    agreed = []
    agreeing = threading.Thread(target=lambda: agreed.append(hub.agree({"job_id": "j1"}, 1)))
    agreeing.start()
    assert spoke.agree({"job_id": "x"}, 1) == {"job_id": "j1"}
    agreeing.join(20)
    yield hub, spoke, port, [f for f in packed if json.loads(f[1])["sid"] == spoke.wire.sid], \
        notes
    spoke.close()
    hub.close()


def test_a_disconnect_read_while_the_next_connection_greets_keeps_that_connection(monkeypatch):
    """A loaded machine: the hub reads the disconnect of a launcher's TCP probe only once that
    launcher's ZeroMQ connection, on the descriptor the probe freed, has greeted. The greeting
    read with that event is not the closed connection's: the launcher stays joined."""
    monkeypatch.setenv("PLATFORM_RENDEZVOUS_TIMEOUT", "20")
    handle_event = Hub.handle_event

    def late(self, monitor):
        if monitor.poll(0) and self.socket is not None:
            self.socket.poll(2000)  # hold the event until a message waits behind it
        return handle_event(self, monitor)

    monkeypatch.setattr(Hub, "handle_event", late)
    port = free_port_pair()
    notes: list[str] = []
    hub = Hub("127.0.0.1", port, 2, key=KEY, note=notes.append, silence_s=10)
    try:
        spoke = Spoke("127.0.0.1", port, 1, 2, "node1", key=KEY, silence_s=10)
        agreeing = threading.Thread(target=lambda: hub.agree({"job_id": "j1"}, 1))
        agreeing.start()
        assert spoke.agree({"job_id": "x"}, 1) == {"job_id": "j1"}, notes
        agreeing.join(20)
        assert not spoke.broken and not notes, notes
        spoke.close()
    finally:
        hub.close()


def test_a_replayed_message_of_a_joined_launcher_is_refused(linked):
    """The Spoke's own greeting and join, replayed from another connection: refused as
    replays (taken, they would greet as node 1's session and join as a second node 1)."""
    hub, spoke, port, sent, notes = linked
    hello, join = (next(f for f in sent if json.loads(f[1])["op"] == op)
                   for op in ("hello", "join"))
    outsider = Peer(port, None)
    try:
        outsider.send(hello)
        outsider.send(join)
        wait_for(lambda: any("replayed" in n for n in notes), 10, what="the replay refused")
        assert hub.stop_reason(1) is None
        assert [p.node for p in hub.peers.values()] == [1]
        assert not any("another launcher already joined" in n for n in notes)
    finally:
        outsider.close()
    assert spoke.stop_reason(1) is None and not spoke.broken


def test_a_signed_failed_from_a_peer_that_did_not_join_is_refused(linked):
    """A peer with the job key greets (a key holder may) but never joined: its `failed` does
    not stop the job."""
    hub, spoke, port, sent, notes = linked
    peer = Peer(port, KEY)
    try:
        peer.send(peer.wire.pack("hello", protocol=2))
        welcome = peer.receive()
        assert welcome is not None
        hub_sid = json.loads(welcome[1])["sid"]
        peer.send(peer.wire.pack("failed", to=hub_sid, server="node1", reason="forged",
                                 attempt=1))
        wait_for(lambda: any("not joined" in n for n in notes), 10, what="the refusal")
        assert hub.stop_reason(1) is None and spoke.stop_reason(1) is None
    finally:
        peer.close()


def test_hostile_frames_leave_the_link_working(linked):
    """Every hostile payload as a ZeroMQ message (unsigned and falsely signed), an empty and a
    5-frame message, a 20 MB frame: the link keeps working (a stop still goes through) and the
    refusals are said once per kind, not per message."""
    hub, spoke, port, sent, notes = linked
    peer = Peer(port, None)
    try:
        for payload in HOSTILE:
            peer.send([b"", payload])
            peer.send([b"f" * 64, payload])
            peer.send([payload])
        peer.send([b""] * 5)
        peer.send([b"x" * 20_000_000])
        time.sleep(1)
    finally:
        peer.close()
    assert hub.alive() and spoke.alive()
    assert hub.stop_reason(1) is None and spoke.stop_reason(1) is None
    assert len(notes) <= 20
    spoke.tell_failed("node1", "a real failure", 1)
    wait_for(lambda: hub.stop_reason(1), 10, what="the real stop at node 0")
    assert hub.stop_reason(1) == "server node1: a real failure"


def test_a_frozen_spoke_is_a_failed_server_and_conclude_returns(monkeypatch):
    """A Spoke that says nothing any more (its link's thread stopped, as in a frozen process):
    node 0 names it after the heartbeat deadline, and conclude does not wait for it."""
    monkeypatch.setenv("PLATFORM_RENDEZVOUS_TIMEOUT", "20")
    port = free_port_pair()
    hub = Hub("127.0.0.1", port, 2, key=None, silence_s=2)
    spoke = Spoke("127.0.0.1", port, 1, 2, "node1", key=None, silence_s=2)
    try:
        agreeing = threading.Thread(target=lambda: hub.agree({"job_id": "j"}, 1))
        agreeing.start()
        spoke.agree({"job_id": "j"}, 1)
        agreeing.join(20)
        spoke.tick = lambda now: None  # type: ignore  # it pings no more
        wait_for(lambda: hub.stop_reason(1), 15, what="node 0 names the silent server")
        assert hub.stop_reason(1) == "server node1: silent for 2 s (frozen or cut off)"
        assert hub.gone() == ["node1"]
        assert hub.conclude(1, True, "node0") == ["node1"]
    finally:
        spoke.close()
        hub.close()


def test_the_key_of_a_job(tmp_path):
    assert signing_key(None, None) is None
    assert signing_key(None, "job-7") == signing_key(None, "job-7") != signing_key(None, "job-8")
    assert signing_key("secret", "job-7") != signing_key(None, "job-7")
    key_file = tmp_path / "key"
    key_file.write_text("secret\n")
    os.chmod(key_file, 0o644)
    with pytest.raises(ConfigError) as refused:
        signing_key(f"@{key_file}", None)
    assert refused.value.problems[0].code == "LAUNCH_JOB_KEY" and "chmod 600" in str(
        refused.value)
    assert "secret" not in str(refused.value)
    os.chmod(key_file, 0o600)
    assert signing_key(f"@{key_file}", None) == signing_key("secret", None)
    assert signing_key(None, None, derived=b"table") == b"table"


@pytest.mark.parametrize("step, valid", [("60", True), ("0", True), ("9999999999", True),
                                         ("", False), ("-1", False), ("6.0", False),
                                         ("²", False), ("12345678901", False)])
def test_a_resume_step_in_the_identity_is_a_checkpoints_step(step, valid):
    """What node 0 sends with a restarted attempt's `go` (launcher/resume.py): a step number a
    checkpoint folder can have, else the message is refused before anything acts on it."""
    assert valid_identity({"job_id": "j", "resume_step": step}) is valid
