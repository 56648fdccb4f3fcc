"""What both ends of the job link share: what each attempt was told, and the thread that owns
the ZeroMQ socket.

A ZeroMQ socket belongs to one thread: the link's thread reads it, sends what other threads
posted (`post`, woken through a pipe), pings the other end and watches its silence. Every
other thread only reads and changes the state under `cond`.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from typing import Callable, Deque, Dict, List, Optional

import zmq

from platform_plugin.launcher.servers.link_protocol import JobLink
from platform_plugin.launcher.servers.wire import MAX_MESSAGE, Wire

MAX_SAID = 20  # refusals said on the launcher's output, one per kind, at most this many kinds
LINGER_MS = 1000  # what close() gives a last "bye" to leave
ZMTP_MARGIN_S = 5.0  # ZeroMQ's heartbeat closes a silent connection this long after the link


def socket_options(sock: zmq.Socket, silence_s: float) -> None:
    """What both ends set: a message cap (libzmq closes a connection that sends more), ZMTP
    heartbeats (libzmq closes a connection whose peer's TCP went quiet: a half-open one after a
    switch reboot), a bounded handshake (a connection that never speaks ZMTP is closed), and a
    bounded linger."""
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
    # later than the link's own deadline, which names the silent server (tick)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, int((silence_s + ZMTP_MARGIN_S) * 1000))
    sock.setsockopt(zmq.HEARTBEAT_TTL, int((silence_s + ZMTP_MARGIN_S) * 1000))
    sock.setsockopt(zmq.HANDSHAKE_IVL, 5000)
    sock.setsockopt(zmq.RCVHWM, 1000)
    sock.setsockopt(zmq.LINGER, LINGER_MS)


class Linked(JobLink):
    """State shared by both ends, guarded by one condition, and the socket's thread."""

    def __init__(self, key: Optional[bytes], note: Optional[Callable[[str], None]],
                 silence_s: float):
        self.cond = threading.Condition()
        self.stops: Dict[int, str] = {}
        self.closing = False
        self.broken = ""  # set when the other end vanished (applies to every later attempt)
        self.note, self.silence_s = note, silence_s
        self.ping_s = min(1.0, silence_s / 5)
        self.wire = Wire(key)
        self.said: List[str] = []  # the refusals said (kinds), for the output and the tests
        self.outbox: Deque[List[bytes]] = collections.deque()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        self.context = zmq.Context(io_threads=1)
        self.thread: threading.Thread | None = None
        self.socket: zmq.Socket | None = None

    def say_unsigned(self, where: str) -> None:
        """Said once per launcher: the job has no key (signing_key.py)."""
        if self.wire.key is None and self.note is not None:
            self.note(f"the job link on {where} is not authenticated: whoever can reach that "
                      "port can stop or start this job (--job-key or PLATFORM_JOB_KEY, the same "
                      "on every server, signs it)")

    def stop_reason(self, attempt: int) -> str | None:
        with self.cond:
            return self.stops.get(attempt) or self.broken or None

    def post(self, frames: List[bytes]) -> None:
        """Queue a message for the link's thread to send (any thread)."""
        self.outbox.append(frames)
        if self.closing:
            return  # finish() wakes the thread a last time
        try:
            os.write(self.wake_write, b"!")
        except BlockingIOError:
            pass  # the pipe is full: the thread is woken already

    def refused(self, kind: str, text: str) -> None:
        """A message the link did not take: said once per kind (never per message)."""
        if kind in self.said or len(self.said) >= MAX_SAID:
            return
        self.said.append(kind)
        if self.note is not None:
            self.note(f"the job link refused a message: {text} (said once per kind)")

    def alive(self) -> bool:
        """The link's thread still runs (every wait gives up when it does not)."""
        return self.thread is not None and self.thread.is_alive()

    def start(self, sock: zmq.Socket, extra: Optional[zmq.Socket] = None) -> None:
        self.socket = sock
        self.thread = threading.Thread(target=self._run, args=(sock, extra), name="job-link",
                                       daemon=True)
        self.thread.start()

    def _run(self, sock: zmq.Socket, extra: Optional[zmq.Socket]) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self.wake_read, zmq.POLLIN)
        if extra is not None:
            poller.register(extra, zmq.POLLIN)
        next_tick = time.monotonic()
        try:
            while True:
                events = dict(poller.poll(int(max(0.0, next_tick - time.monotonic()) * 1000)))
                if self.wake_read in events:
                    self._drain_wake()
                self._send_posted(sock)
                if self.closing:
                    self._send_posted(sock)  # what was posted just before the end (a "bye")
                    return
                # the silence deadline before what waits: a launcher woken after a freeze must
                # not take the messages queued while it slept for the others being alive
                if time.monotonic() >= next_tick:
                    self.tick(time.monotonic())
                    next_tick = time.monotonic() + self.ping_s
                try:
                    if sock in events:
                        for _ in range(1000):  # a flood cannot hold the ticks back
                            if not self.receive_one(sock):
                                break
                    if extra is not None and extra in events:
                        for _ in range(1000):
                            if not self.handle_event(extra):
                                break
                except (zmq.ZMQError, OSError) as exc:  # (EMFILE in a flood): the link goes on
                    self.refused("socket error", f"{type(exc).__name__}: {exc}")
                    time.sleep(0.01)
        finally:
            if extra is not None:
                extra.close(0)
            sock.close(LINGER_MS)
            self.context.term()

    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_read, 4096):
                pass
        except BlockingIOError:
            pass

    def _send_posted(self, sock: zmq.Socket) -> None:
        while self.outbox:
            frames = self.outbox.popleft()
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # the peer is gone or its queue is full: its silence is what counts

    def receive_one(self, sock: zmq.Socket) -> bool:
        """Handle one message (its first 4 frames: a longer one is refused anyway); False
        when there is nothing to read."""
        try:
            first = sock.recv(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        frames = [first.bytes]
        while sock.getsockopt(zmq.RCVMORE):
            frame = sock.recv()
            if len(frames) < 4:
                frames.append(frame)
        try:
            self.handle(frames, first.get(zmq.SRCFD))
        except Exception as exc:  # a message the checks let through must not end the link
            self.refused("internal", f"{type(exc).__name__} while handling it")
        return True

    def handle(self, frames: List[bytes], fd: int) -> None:
        """One received message; `fd`: the descriptor of the connection it came on."""
        raise NotImplementedError

    def handle_event(self, monitor: zmq.Socket) -> bool:
        """One event of the socket's monitor; False when there is none to read."""
        raise NotImplementedError

    def tick(self, now: float) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Ask the link's thread to send what is queued and end (bounded)."""
        if self.closing:
            return
        self.closing = True
        try:
            os.write(self.wake_write, b"!")
        except BlockingIOError:
            pass
        if self.thread is not None:
            self.thread.join(LINGER_MS / 1000 + 3)
        if not self.alive():
            os.close(self.wake_read)
            os.close(self.wake_write)
