"""The cleanup's remover process: it unlinks what the walk decided, on another core.

Run as a script (`python -I -S unlinker.py PARENT_PID SOCKET_FD`) by `remover.Remover`, so
stdlib only and nothing of the package is imported. Why a process and not a thread: on tmpfs an unlink is a few microseconds of system call, so a thread that
unlinks and the walk that decides hand the GIL back and forth all the time and hardly run at
once (measured: the thread bought nothing over unlinking inline); a process has its own.

It receives one job per message on a SOCK_SEQPACKET socket, each with ONE descriptor (sent
with SCM_RIGHTS: a duplicate of the folder the walk opened with O_NOFOLLOW and checked for
its filesystem), so it removes exactly where the walk decided, with the same guarantees:

    U <job:4> name\\0name\\0...        unlink these names in the folder (descriptor)
    P <job:4> <child job:4>...        the job is broken when one of these is (big folders)
    B <job:4>                         the job is broken (the walk unlinked some of it itself)
    R <job:4> name\\0<child job:4>...  rmdir `name` in the parent folder (descriptor) unless
                                      the job or one of the children is broken

When the walk shuts its side, the worker answers what went wrong, one message each, then D:

    F <job:4> name\\0reason           this name (empty: the folder itself) was not removed
    B <job:4>                         this folder is broken (something in it stayed)
    D                                 done: everything asked was tried

It dies with the walk: PR_SET_PDEATHSIG (SIGKILL), checked against PARENT_PID for a walk that
died before that was set. It runs in its own process group, so a terminal's Ctrl-C reaches
only the walk, which stops sending and lets the worker finish the folders already sent.
`Jobs` is also what the walk uses inline when no process can be started.
"""
from __future__ import annotations

import os
import socket
import sys

try:
    import ctypes
except ImportError:  # an interpreter built without it: no PR_SET_PDEATHSIG (see _die_with)
    ctypes = None  # type: ignore[assignment]

MAX_MESSAGE = 16 * 1024  # well below a unix socket's default send buffer (208 KiB)
_FD_BYTES = 4


def job_bytes(job: int) -> bytes:
    return job.to_bytes(4, "little")


def _jobs_in(data: bytes) -> set[int]:
    return {int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)}


class Jobs:
    """Carry out the walk's removals in the order given; remember what failed."""

    def __init__(self) -> None:
        self.broken: set[int] = set()
        self.failures: list[tuple[int, bytes, str]] = []  # (job, name or b"", reason)

    def run(self, message: bytes, fd: int) -> None:
        op, job, rest = message[:1], int.from_bytes(message[1:5], "little"), message[5:]
        try:
            if op == b"U":
                self.unlink(fd, job, rest.split(b"\0"))
            elif op == b"B":
                self.broken.add(job)
            elif op == b"P":
                if not self.broken.isdisjoint(_jobs_in(rest)):
                    self.broken.add(job)
            elif op == b"R":
                name, _, children = rest.partition(b"\0")
                self.rmdir(fd, job, name, _jobs_in(children))
        except Exception as exc:  # noqa: BLE001 - report it, keep serving the other jobs
            self.broken.add(job)
            self.failures.append((job, b"", f"{type(exc).__name__}: {exc}"))

    def unlink(self, fd: int, job: int, names: list[bytes]) -> None:
        unlink = os.unlink
        for name in names:
            try:
                unlink(name, dir_fd=fd)
            except FileNotFoundError:
                continue  # gone since the walk listed it (another process): what we wanted
            except OSError as exc:
                self.broken.add(job)
                self.failures.append((job, name, exc.strerror or str(exc)))

    def rmdir(self, fd: int, job: int, name: bytes, children: set[int]) -> None:
        # the children's jobs came first (the walk sends them first): their result is final
        if job in self.broken or not self.broken.isdisjoint(children):
            self.broken.add(job)  # not empty: no rmdir, no "Directory not empty" error
            return
        try:
            os.rmdir(name, dir_fd=fd)
        except FileNotFoundError:
            return  # removed meanwhile by someone else: gone, as planned
        except OSError as exc:
            self.broken.add(job)
            self.failures.append((job, b"", exc.strerror or str(exc)))

    def answers(self) -> list[bytes]:
        out = [b"F" + job_bytes(job) + name + b"\0" + reason.encode("utf-8", "replace")
               for job, name, reason in self.failures]
        return out + [b"B" + job_bytes(job) for job in sorted(self.broken)] + [b"D"]


def _die_with(parent: int) -> None:
    try:
        ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = 1, SIGKILL = 9
    except (OSError, AttributeError):  # (AttributeError: no ctypes, or no prctl)
        pass  # no prctl: the socket's end still stops the worker after the folder in hand
    if os.getppid() != parent:
        os._exit(1)  # the walk died before PR_SET_PDEATHSIG was set


def serve(parent: int, sock_fd: int) -> None:
    _die_with(parent)
    sock = socket.socket(fileno=sock_fd)
    jobs = Jobs()
    space = socket.CMSG_SPACE(_FD_BYTES)
    while True:
        message, ancillary, _flags, _addr = sock.recvmsg(MAX_MESSAGE + 1024, space)
        fds = [int.from_bytes(data[i:i + _FD_BYTES], sys.byteorder)
               for level, kind, data in ancillary if kind == socket.SCM_RIGHTS
               for i in range(0, len(data) - _FD_BYTES + 1, _FD_BYTES)]
        if not message:
            break  # the walk shut its side: every job is in
        try:
            if fds:
                jobs.run(message, fds[0])
        finally:
            for fd in fds:
                os.close(fd)
    for answer in jobs.answers():
        sock.send(answer)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
