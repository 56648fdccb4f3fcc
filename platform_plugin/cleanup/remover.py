"""Removing a matched folder's contents in a worker process, and what the report says once the
removals are known.

The walk decides (scandir, protected names, the `lstat` for the byte count) and the worker
(`unlinker.py`, its own interpreter, started with the walk) unlinks, in the order it was
asked: a folder's files, then the folder itself, children before parents. So on two cores
the decisions about one folder run while the previous one is removed - a thread could not do
that: on tmpfs both sides are mostly Python between microsecond system calls, and the GIL let
only one run at a time. Each job carries a duplicate of the folder's descriptor (opened by the
walk with O_NOFOLLOW and checked for its filesystem), so the worker removes exactly where the
walk decided, with the same guarantees; the socket's small buffer bounds the jobs (and
descriptors) in flight, and when it is full the walk unlinks that folder itself instead of
waiting. The worker dies with the walk's process (PR_SET_PDEATHSIG).

A removal can fail (an immutable file, a permission): the folder and every folder above it
are then not removed as a whole and the report lists what did go, piece by piece. Since that
is only known once the worker is done, each matched folder leaves a `FolderOutcome` and the
report is resolved at the end, children before parents.
"""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field

from platform_plugin.cleanup import unlinker
from platform_plugin.cleanup.unlinker import MAX_MESSAGE, Jobs, job_bytes

SEND_BUFFER = 32 * 1024  # the kernel doubles it: ~10-15 folders of 200 files queued at most
LINK = -1  # in `sizes`: this piece is a symlink (reported as a link of 0 bytes)


@dataclass(frozen=True)
class Removal:
    """One removed (or, in a dry run, removable) item. `rel` is relative to ROOT, "/"-joined."""

    rel: str
    category: str
    kind: str  # "dir" (the whole tree) | "file" | "link"
    files: int  # files and links (a folder counts what was inside it)
    bytes: int  # apparent size (st_size) of those files; links count 0


@dataclass(eq=False)
class FolderOutcome:
    """One matched folder: what the walk planned, then what the worker could do."""

    rel: str
    category: str
    planned_whole: bool = True  # nothing in it had to stay, every subfolder planned whole too
    files: int = 0  # files and links planned to go, subfolders included
    bytes: int = 0
    names: list[str] = field(default_factory=list)  # files and links directly inside
    sizes: list[int] = field(default_factory=list)  # their st_size, LINK for a link
    children: list["FolderOutcome"] = field(default_factory=list)
    failed: set[str] = field(default_factory=set)  # names the worker could not unlink
    broken: bool = False  # something in it or below it stayed after all
    removals: list[Removal] = field(default_factory=list)  # resolved: what the report lists
    job: int = -1  # its number for the worker, once it was sent one

    def resolve(self) -> None:
        """Fill `removals`; its children must be resolved already (post-order)."""
        if self.planned_whole and not self.broken:
            self.removals = [Removal(self.rel, self.category, "dir", self.files, self.bytes)]
        else:
            self.removals = [
                Removal(f"{self.rel}/{name}", self.category, "link" if size == LINK else "file",
                        1, max(size, 0))
                for name, size in zip(self.names, self.sizes) if name not in self.failed]
            for child in self.children:
                self.removals += child.removals
        self.children = []  # resolved: free the subtree


class Remover:
    """The walk's side of the worker process. `close()` waits until every removal sent is
    done and marks what failed on the outcomes."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        self._outcomes: list[FolderOutcome] = []  # by job number
        self._sock: socket.socket | None = None  # to the worker, once started
        self._pid = 0
        self._here = Jobs()  # the folders the walk removes itself (all, without a worker)
        self._alone = False  # no worker could be started
        self.done_here = 0  # jobs the walk did itself because the worker was behind
        self._rights, self._flags = (0, 0), (0, 0)

    @property
    def pid(self) -> int:
        """The worker's process id (0 before it started, or when removing inline)."""
        return self._pid

    def unlink_all(self, dir_fd: int | None, outcome: FolderOutcome) -> None:
        """Hand the folder's files to the worker or, when it has jobs queued already (the
        socket takes ~10-15), unlink them here: the walk then helps instead of waiting."""
        header = b"U" + self._job(outcome)
        payload = os.fsencode("\0".join(outcome.names))
        while len(payload) > MAX_MESSAGE:  # one message each ~16 KiB of names, at a "\0"
            cut = payload.rindex(b"\0", 0, MAX_MESSAGE)
            self._send(header + payload[:cut], dir_fd, may_run_here=True)
            payload = payload[cut + 1:]
        self._send(header + payload, dir_fd, may_run_here=True)

    def rmdir(self, parent_fd: int | None, name: str, outcome: FolderOutcome) -> None:
        """Always the worker's (unless there is none): it alone knows whether the folder's
        files and subfolders all went, after the jobs it was sent before."""
        job = self._job(outcome)
        children = b"".join(job_bytes(child.job) for child in outcome.children if child.job >= 0)
        room = MAX_MESSAGE - MAX_MESSAGE % 4
        while len(children) > room:  # thousands of subfolders: the rest ahead, as P jobs
            self._send(b"P" + job + children[:room], parent_fd)
            children = children[room:]
        self._send(b"R" + job + os.fsencode(name) + b"\0" + children, parent_fd)

    def close(self) -> None:
        """Every job sent is done (or the worker is gone): record what failed."""
        answers: list[bytes] = [b"D"]
        status: int | None = 0
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_WR)  # the worker's EOF: every job is in
                answers = self._answers()
            except OSError:
                answers = []  # the worker is gone: reported below
            finally:
                self._sock.close()
                status = _reap(self._pid)
        self._record(self._here.answers()[:-1] + answers, status)

    def _answers(self) -> list[bytes]:
        answers: list[bytes] = []
        assert self._sock is not None
        while not answers or answers[-1] not in (b"", b"D"):  # D: done; b"": it is gone
            answers.append(self._sock.recv(MAX_MESSAGE + 1024))
        return answers

    def _job(self, outcome: FolderOutcome) -> bytes:
        if outcome.job < 0:
            outcome.job = len(self._outcomes)
            self._outcomes.append(outcome)
        return job_bytes(outcome.job)

    def start(self) -> None:
        """Start the worker now (else at the first job): its interpreter then starts while
        the walk reads the first folders."""
        if self._sock is None and not self._alone:
            self._start()

    def _send(self, message: bytes, fd: int | None, may_run_here: bool = False) -> None:
        assert fd is not None, "the walk hands over open folders only"
        self.start()
        if self._sock is None:
            self._here.run(message, fd)
            return
        try:  # MSG_NOSIGNAL: a dead worker is EPIPE here, never a SIGPIPE
            self._sock.sendmsg([message], [(*self._rights, fd.to_bytes(4, sys.byteorder))],
                               self._flags[may_run_here])
        except BlockingIOError:  # the worker is behind: this folder is done here
            self.done_here += 1
            self._run_here(message, fd)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the worker died: close() says so and claims nothing
        except OSError as exc:  # the worker lives, the kernel refused (ENOBUFS, ENOMEM...)
            self._not_sent(message, fd, exc)

    def _run_here(self, message: bytes, fd: int) -> None:
        self._here.run(message, fd)
        job = message[1:5]
        if int.from_bytes(job, "little") in self._here.broken:
            self._send(b"B" + job, fd)  # its rmdir (the worker's) must know

    def _not_sent(self, message: bytes, fd: int, exc: OSError) -> None:
        """A job the worker never got must not be claimed: unlinks are done here (as when
        its queue is full); a lost rmdir (R, P) leaves the folder, listed piece by piece."""
        if message[:1] == b"U":
            self._run_here(message, fd)
        elif message[:1] in (b"R", b"P"):  # a lost B costs one "Directory not empty" only
            job = int.from_bytes(message[1:5], "little")
            self._here.broken.add(job)
            self._here.failures.append(
                (job, b"", f"not removed (the remover process was not reached: "
                           f"{exc.strerror or exc})"))

    def _start(self) -> None:
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:  # EMFILE, ENFILE, ENOMEM: remove inline
            self._alone = True
            return
        try:  # a short queue: the walk starts unlinking itself sooner, and waits less at the end
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        except OSError:
            pass  # the default (bigger) queue: only later help from the walk
        self._rights = (socket.SOL_SOCKET, socket.SCM_RIGHTS)  # a descriptor rides along
        self._flags = (socket.MSG_NOSIGNAL, socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)
        # dup2 to a fixed number in the child only: the walk's copy stays close-on-exec, so no
        # other process started meanwhile (a kernel's threads) inherits the worker's end
        target = 4 if theirs.fileno() == 3 else 3
        # the dup2 first: with fd 0-2 closed (`platform-run clean <&-`) the socket may BE one
        # of them, and /dev/null opened there first would replace it
        actions: list[tuple] = [(os.POSIX_SPAWN_DUP2, theirs.fileno(), target)]
        actions += [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
        try:
            self._pid = os.posix_spawn(
                sys.executable, [sys.executable, "-I", "-S", unlinker.__file__,
                                 str(os.getpid()), str(target)], os.environ,
                file_actions=actions, setpgroup=0)  # its own group: Ctrl-C is the walk's
            self._sock = ours
        except (OSError, ValueError):  # no interpreter to start (embedded): remove inline
            ours.close()
            self._alone = True
        finally:
            theirs.close()

    def _record(self, answers: list[bytes], status: int | None = 0) -> None:
        done = bool(answers) and answers[-1] == b"D"
        for answer in answers:
            outcome = self._outcomes[int.from_bytes(answer[1:5], "little")] if answer[1:] else None
            if answer[:1] == b"F" and outcome is not None:
                name, _, reason = answer[5:].partition(b"\0")
                shown = f"{outcome.rel}/{os.fsdecode(name)}" if name else f"{outcome.rel}/"
                if name:
                    outcome.failed.add(os.fsdecode(name))
                self.errors.append(f"{shown}: {reason.decode('utf-8', 'replace')}")
            elif answer[:1] == b"B" and outcome is not None:
                outcome.broken = True
        if not done:  # what it removed is unknown: claim nothing, say so
            for outcome in self._outcomes:
                outcome.broken = True
                outcome.failed.update(outcome.names)
            self.errors.append(f"./: the remover process ended early ({_status(status)}); "
                               f"what it removed is not listed: run the cleanup again")


def _reap(pid: int) -> int | None:
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:  # reaped by someone else (a host's SIGCHLD handler): the
        return None  # answers alone say whether it finished (the D); its status is unknown


def _status(status: int | None) -> str:
    if status is None:
        return "its exit status is unknown: another handler reaped it"
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else "unknown"
