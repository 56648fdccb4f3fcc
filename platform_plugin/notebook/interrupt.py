"""Ctrl-C (or SIGTERM) during `platform-run debug|full`: interrupt the cell, then end quietly.

The kernel runs in its own session, so the terminal's Ctrl-C reaches only the runner. Letting
the runner's KeyboardInterrupt go through papermill into jupyter_client's shutdown would send
the busy kernel SIGINT and its shutdown request at the same moment: the kernel's cell stops,
its reply meets a socket the shutdown has just closed, and the kernel prints its own ZMQError
traceback on the terminal (its stderr is the runner's: a real error still shows).

So the first signal interrupts the cell the way Jupyter's stop button does (SIGINT to the
kernel's process group: a `%dist_run` in the cell stops its ranks) and lets the run end on its
own: the cell's KeyboardInterrupt is recorded in the output notebook, the idle kernel shuts
down cleanly, and `execute()` raises KeyboardInterrupt (exit 130). A cell that does not stop
within FORCE_AFTER_S, or a second signal, ends the run at once: the kernel is killed (no
shutdown to race with), its jobs' ranks die with their launcher (launcher/processes/spawn.py).

A run that nobody interrupted sends the kernel no SIGINT at all. jupyter_client's
`shutdown_kernel` interrupts the kernel before it asks it to shut down, to free a kernel busy in
a cell; ipykernel answers the shutdown request on its control thread, so an idle kernel needs no
interrupt, and a SIGINT that lands while it still closes the last request's handler is logged
as `[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel.` just before "notebook succeeded".
The interrupt stays for a kernel whose cell never replied (a --timeout that expired).
"""
from __future__ import annotations

import _thread
import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from typing import Any, Iterator

# a cell's %dist_run stops its ranks within the launcher's grace (3 s by default) after SIGINT
FORCE_AFTER_S = 10.0


class Interrupts:
    """Counts the signals of one run and knows its kernel (through `manager_class()`)."""

    def __init__(self) -> None:
        self.count = 0
        self.kernel_group: int | None = None
        self.cell_started = False  # before that the kernel may still be starting
        self.cell_running = False  # a cell was sent and its reply has not come back
        self.kernel_process: Any = None  # its Popen
        self._timer: threading.Timer | None = None

    def manager_class(self) -> type:
        """A kernel manager for nbclient (`kernel_manager_class`) that tells this object its
        kernel's process group, and kills the kernel at the end of an interrupted run."""
        from jupyter_client.manager import AsyncKernelManager

        interrupts = self

        class Manager(AsyncKernelManager):
            async def _async_post_start_kernel(self, **kwargs: Any) -> None:
                await super()._async_post_start_kernel(**kwargs)
                interrupts.kernel_group = getattr(self.provisioner, "pgid", None)
                interrupts.kernel_process = getattr(self.provisioner, "process", None)

            async def _async_interrupt_kernel(self) -> None:
                if self.shutting_down and not interrupts.count and not interrupts.cell_running:
                    return  # the shutdown's own interrupt: nothing runs (module docstring)
                await super()._async_interrupt_kernel()

            # AsyncKernelManager's shutdown_kernel is a coroutine; KernelManager, which mypy
            # sees as the base, declares it plain
            async def shutdown_kernel(  # type: ignore[override]
                    self, now: bool = False, restart: bool = False) -> None:
                # after a forced end the kernel may still be busy: kill it, never race it
                await super().shutdown_kernel(now=now or interrupts.count > 1, restart=restart)

        return Manager

    def engine_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """papermill's options plus this kernel manager, and a check before every cell: an
        interrupt that found the kernel between two cells must not let the next one start."""
        on_cell_start = options.get("on_cell_start")

        def before_cell(**kwargs: Any) -> None:
            if self.count:
                self.count = max(self.count, 2)
                raise KeyboardInterrupt
            self.cell_started = True
            if on_cell_start:
                on_cell_start(**kwargs)

        def sent(**_: Any) -> None:  # a code cell goes to the kernel (markdown never does)
            self.cell_running = True

        def replied(**_: Any) -> None:  # its reply came: the kernel is idle
            self.cell_running = False

        return {**options, "kernel_manager_class": self.manager_class(),
                "on_cell_start": before_cell, "on_cell_execute": sent, "on_cell_executed": replied}

    def handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1 and self._interrupt_kernel():
            self._timer = threading.Timer(FORCE_AFTER_S, self._force)
            self._timer.daemon = True
            self._timer.start()
            return
        self.count = max(self.count, 2)
        raise KeyboardInterrupt

    def _interrupt_kernel(self) -> bool:
        """False when there is no cell to interrupt: a kernel still starting (before ipykernel
        handles SIGINT) died of it - "Kernel died before replying to kernel_info", exit 1
        with the kernel's KeyboardInterrupt traceback; it is killed instead (count 2)."""
        if self.kernel_group is None or not self.cell_started:
            return False
        try:
            os.killpg(self.kernel_group, signal.SIGINT)
        except OSError:
            return False
        return True

    def _force(self) -> None:
        self.count = max(self.count, 2)
        _thread.interrupt_main()  # KeyboardInterrupt in the runner: papermill stops, kill

    def stop(self) -> None:
        if self._timer:
            self._timer.cancel()
        self._kill_left_kernel()

    def _kill_left_kernel(self) -> None:
        """An interrupt while the kernel started left it running: nbclient cleans up only a
        kernel that answered (its setup_kernel's `finally` comes after the start)."""
        process = self.kernel_process
        if not self.count or process is None or process.poll() is not None:
            return
        try:
            os.killpg(self.kernel_group or process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass


def abandon_cell_tasks() -> None:
    """After the runner's KeyboardInterrupt left a cell: its tasks (nbclient's wait for the
    reply, its kernel-alive and output polls) still wait on this thread's loop, which papermill's
    cleanup runs again to shut the kernel down. The kernel killed there would end them with
    DeadKernelError: nbclient's "Kernel died while waiting for execute reply." and, once the task
    is collected, asyncio's "Task exception was never retrieved" traceback on the terminal. The
    run has already stopped: they are cancelled, and how they end is not reported."""
    from jupyter_core.utils import ensure_event_loop

    for task in asyncio.all_tasks(ensure_event_loop()):
        task.cancel()
        task.add_done_callback(_ignore_outcome)


def _ignore_outcome(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()  # marks it retrieved


@contextlib.contextmanager
def interruptible() -> Iterator[Interrupts]:
    """SIGINT and SIGTERM handled as above for the block (main thread only; elsewhere the
    signals keep their handlers and the object only counts nothing)."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {sig: signal.signal(sig, interrupts.handle) for sig in (signal.SIGINT,
                                                                     signal.SIGTERM)}
    try:
        yield interrupts
    finally:
        interrupts.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
