"""The cleanup's worker process (cleanup/remover.py + unlinker.py): it dies with the walk's
process on kill -9, finishes the folders already sent on Ctrl-C and then exits, splits big
folders over several messages, reports a worker that died, removes inline when no process
or socket can be had, and never claims a job the kernel refused to send. The walk-level
guarantees are in test_walk.py/test_hostile_input.py."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import platform_plugin.cleanup.walk as walk_module
from platform_plugin.cleanup import run as cleanup
from platform_plugin.cleanup.remover import FolderOutcome, Remover
from platform_plugin.util.procfs import alive

from tests.helpers import REPO, clean_env, terminal_sigint, wait_for
from tests.notebook.helpers import write_tree

# Sends one folder to the worker, prints the worker's pid, then waits to be killed/interrupted.
HOLDER = """
import os, sys, time
from platform_plugin.cleanup.remover import FolderOutcome, Remover
errors = []
remover = Remover(errors)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
outcome = FolderOutcome("cache", "caches", names=sorted(os.listdir(sys.argv[1])))
try:
    remover.unlink_all(fd, outcome)
    if len(sys.argv) > 2 and os.fork() == 0:  # a child that keeps the socket's end open
        time.sleep(120)
        os._exit(0)
    print(remover.pid, flush=True)
    time.sleep(120)
finally:
    remover.close()
    print("closed", errors, outcome.broken, flush=True)
"""


def start_holder(folder: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), *extra], cwd=REPO,
                              env=clean_env(PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                              text=True, start_new_session=True, preexec_fn=terminal_sigint)
    assert holder.stdout is not None
    worker = int(holder.stdout.readline())
    assert worker > 0 and alive(worker)
    return holder, worker


def test_kill_9_of_the_cleanup_takes_its_worker_along(tmp_path):
    """Even when the socket stays open elsewhere (here a forked child holds it: no EOF tells
    the worker), the worker dies with the process that started it (PR_SET_PDEATHSIG)."""
    write_tree(tmp_path / "cache", {f"k{i}.o": "x" for i in range(10)})
    holder, worker = start_holder(tmp_path / "cache", "--fork-a-socket-holder")
    try:
        # the folder sent is done: the worker is past its start, waiting for the next job
        wait_for(lambda: os.listdir(tmp_path / "cache") == [], timeout=30, what="the unlinks")
        holder.kill()
        holder.wait(timeout=30)
        wait_for(lambda: not alive(worker), timeout=30, what="the worker to die with its parent")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the forked child


def test_ctrl_c_lets_the_worker_finish_what_was_sent_then_it_exits(tmp_path):
    """Ctrl-C reaches the whole process group: the worker ignores it, the walk's side stops
    sending, waits for the folders already sent and reaps the worker."""
    write_tree(tmp_path / "cache", {f"k{i}.o": "x" for i in range(10)})
    holder, worker = start_holder(tmp_path / "cache")
    os.killpg(holder.pid, signal.SIGINT)
    out, _ = holder.communicate(timeout=60)
    assert "closed [] False" in out and holder.returncode != 0  # KeyboardInterrupt
    assert os.listdir(tmp_path / "cache") == []
    assert not alive(worker)


def test_a_worker_killed_midway_is_reported_and_nothing_is_claimed(tmp_path):
    write_tree(tmp_path / "cache", {"a.o": "x"})
    errors: list[str] = []
    remover = Remover(errors)
    outcome = FolderOutcome("cache", "caches", names=["a.o"])
    fd = os.open(tmp_path / "cache", os.O_RDONLY | os.O_DIRECTORY)
    try:
        remover.unlink_all(fd, outcome)
        os.kill(remover.pid, signal.SIGKILL)
        remover.close()
    finally:
        os.close(fd)
    assert len(errors) == 1 and "remover process ended early (signal 9)" in errors[0]
    outcome.resolve()
    assert outcome.broken and outcome.removals == []


def test_folders_bigger_than_one_message_are_removed_whole(tmp_path):
    """~600 KiB of names (ten messages) in one folder, and a folder whose 16,000 subfolders'
    numbers need P messages ahead of its rmdir: a broken one among them keeps it."""
    names = {f"{i:04d}_{'n' * 200}.o": "" for i in range(3000)}
    write_tree(tmp_path / "CODE", {"train.py": "", **{f"kernel_meta/{n}": "" for n in names}})
    report = cleanup.clean(tmp_path / "CODE")
    assert [(r.rel, r.kind, r.files) for r in report.removed] == [("kernel_meta", "dir", 3000)]
    assert report.errors == [] and not (tmp_path / "CODE" / "kernel_meta").exists()

    (tmp_path / "big" / "d").mkdir(parents=True)
    errors: list[str] = []
    remover = Remover(errors)
    big = FolderOutcome("big", "caches")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    big_fd = os.open(tmp_path / "big", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(16_000):
            child = FolderOutcome(f"big/c{i}", "caches")
            if i == 100:  # unlinking a folder fails (EISDIR): this child is broken
                child.names.append("d")
                remover.unlink_all(big_fd, child)
            remover.rmdir(big_fd, f"c{i}", child)  # gone already: not a failure
            big.children.append(child)
        remover.rmdir(fd, "big", big)
        remover.close()
    finally:
        os.close(fd)
        os.close(big_fd)
    assert len(errors) == 1 and errors[0].startswith("big/c100/d:")
    assert big.broken and (tmp_path / "big" / "d").is_dir()


def test_without_a_worker_process_the_walk_removes_inline(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    write_tree(tmp_path / "CODE", {"train.py": "", "kernel_meta/a/k.o": "12"})
    report = cleanup.clean(tmp_path / "CODE")
    assert [(r.rel, r.files, r.bytes) for r in report.removed] == [("kernel_meta", 1, 2)]
    assert report.errors == [] and sorted(os.listdir(tmp_path / "CODE")) == ["train.py"]


def test_while_the_worker_is_behind_the_walk_unlinks_folders_itself(tmp_path):
    """The worker is stopped, so its socket fills up: the next folders are unlinked by the
    walk's process. A failure there still keeps the folder (the worker's rmdir is told, so
    no 'Directory not empty' either), everything else goes."""
    import threading

    for i in range(300):
        write_tree(tmp_path / f"c{i}", {f"k{j}.o": "x" for j in range(3)})
    (tmp_path / "c110" / "sub").mkdir()  # unlink() of a folder fails: c110 is broken
    errors: list[str] = []
    remover = Remover(errors)
    remover.start()
    os.kill(remover.pid, signal.SIGSTOP)
    root_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fds, outcomes = [], []
    # resumed later: long after the socket filled up, while the walk waits to send c110's
    # "broken" note or the rmdirs
    resume = threading.Timer(2.0, os.kill, (remover.pid, signal.SIGCONT))
    resume.start()
    try:
        for i in range(300):
            fds.append(os.open(tmp_path / f"c{i}", os.O_RDONLY | os.O_DIRECTORY))
            outcomes.append(FolderOutcome(f"c{i}", "caches", names=sorted(
                os.listdir(tmp_path / f"c{i}"))))
            remover.unlink_all(fds[-1], outcomes[-1])
        assert remover.done_here > 0  # the socket was full: the walk did those itself
        for i, outcome in enumerate(outcomes):
            remover.rmdir(root_fd, f"c{i}", outcome)
        remover.close()
    finally:
        resume.cancel()
        os.kill(remover.pid, signal.SIGCONT) if alive(remover.pid) else None
        for fd in [root_fd, *fds]:
            os.close(fd)
    assert errors == ["c110/sub: Is a directory"]
    assert sorted(os.listdir(tmp_path)) == ["c110"] and outcomes[110].broken


class RefusingSocket:
    """Stands in for the kernel refusing one kind of job while the worker lives: ENOBUFS,
    ENOMEM (memory pressure) or ETOOMANYREFS (descriptors in flight past RLIMIT_NOFILE, which
    root - these tests - is exempt from) cannot be produced here on demand."""

    def __init__(self, sock, refused: bytes):
        self._sock, self._refused = sock, refused

    def sendmsg(self, buffers, ancillary, flags):
        if buffers[0][:1] == self._refused:
            raise OSError(errno.ENOBUFS, os.strerror(errno.ENOBUFS))
        return self._sock.sendmsg(buffers, ancillary, flags)


def test_a_job_the_kernel_refused_to_send_is_never_claimed(tmp_path):
    """c0's unlinks are refused: the walk does them itself, the worker's rmdir then works.
    c1's rmdir is refused: its file went, the folder stays and the report says so."""
    for name in ("c0", "c1"):
        write_tree(tmp_path / name, {"k.o": "x"})
    errors: list[str] = []
    remover = Remover(errors)
    remover.start()
    real = remover._sock
    fds = [os.open(tmp_path / name, os.O_RDONLY | os.O_DIRECTORY) for name in ("", "c0", "c1")]
    outcomes = [FolderOutcome(f"c{i}", "caches", names=["k.o"], sizes=[1]) for i in (0, 1)]
    try:
        remover._sock = RefusingSocket(real, b"U")
        remover.unlink_all(fds[1], outcomes[0])
        remover._sock = RefusingSocket(real, b"R")
        remover.unlink_all(fds[2], outcomes[1])
        remover.rmdir(fds[0], "c1", outcomes[1])
        remover._sock = real
        remover.rmdir(fds[0], "c0", outcomes[0])
        remover.close()
    finally:
        remover._sock = real
        for fd in fds:
            os.close(fd)
    for outcome in outcomes:
        outcome.resolve()
    claimed = [removal.rel for outcome in outcomes for removal in outcome.removals]
    assert claimed == ["c0", "c1/k.o"]
    assert os.listdir(tmp_path) == ["c1"] and os.listdir(tmp_path / "c1") == []
    assert errors == ["c1/: not removed (the remover process was not reached: "
                      "No buffer space available)"]


# Closes 0 and 1 first (as `platform-run clean <&- >&-` would), so the worker's socket pair
# IS fd 0 and 1: the child must move it to 3 before it puts /dev/null on 0-2.
CLOSED_STDIO = """
import _socket, os, sys
from platform_plugin.cleanup.remover import FolderOutcome, Remover
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
os.close(0)
os.close(1)
errors = []
remover = Remover(errors)
remover.start()
outcome = FolderOutcome("cache", "caches", names=sorted(os.listdir(sys.argv[1])))
remover.unlink_all(fd, outcome)
remover.close()
os.write(2, repr((remover.pid > 0, errors)).encode())
"""


def test_the_worker_gets_its_socket_when_stdin_and_stdout_are_closed(tmp_path):
    write_tree(tmp_path / "cache", {f"k{i}.o": "x" for i in range(5)})
    done = subprocess.run([sys.executable, "-c", CLOSED_STDIO, str(tmp_path / "cache")],
                          cwd=REPO, env=clean_env(PYTHONPATH=str(REPO)), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=60)
    assert done.stderr == "(True, [])"
    assert os.listdir(tmp_path / "cache") == []


# Leaves one descriptor free: the socket pair (two) cannot be made, the walk removes inline.
NO_DESCRIPTORS = """
import _socket, os, resource, sys
from platform_plugin.cleanup.remover import FolderOutcome, Remover
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
names = sorted(os.listdir(sys.argv[1]))
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
spare = []
try:
    while True:
        spare.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    os.close(spare.pop())
errors = []
remover = Remover(errors)
remover.start()
outcome = FolderOutcome("cache", "caches", names=names)
remover.unlink_all(fd, outcome)
remover.close()
print(remover.pid, errors)
"""


def test_without_descriptors_for_the_socket_the_walk_removes_inline(tmp_path):
    write_tree(tmp_path / "cache", {f"k{i}.o": "x" for i in range(5)})
    done = subprocess.run([sys.executable, "-c", NO_DESCRIPTORS, str(tmp_path / "cache")],
                          cwd=REPO, env=clean_env(PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "0 []\n", "")
    assert os.listdir(tmp_path / "cache") == []


def test_ctrl_c_right_after_the_worker_started_reaps_it_and_closes_root(tmp_path, monkeypatch):
    """Interrupted while the mount table is read (the worker already started): no zombie,
    no descriptor left open."""
    write_tree(tmp_path / "CODE", {"train.py": "", "kernel_meta/k.o": "x"})
    started: list[int] = []
    real_start = Remover.start

    def start(self):
        real_start(self)
        started.append(self.pid)

    def interrupted(root):
        raise KeyboardInterrupt

    monkeypatch.setattr(Remover, "start", start)
    monkeypatch.setattr(walk_module, "mount_points_below", interrupted)
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(KeyboardInterrupt):
        cleanup.clean(tmp_path / "CODE")
    try:
        assert started and started[0] > 0
        assert sorted(os.listdir("/proc/self/fd")) == before
        with pytest.raises(ChildProcessError):  # reaped already
            os.waitpid(started[0], os.WNOHANG)
    finally:
        if started and alive(started[0]):  # the old code left it waiting
            os.kill(started[0], signal.SIGKILL)
            os.waitpid(started[0], 0)
