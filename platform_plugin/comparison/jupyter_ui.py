"""The MLflow UI a kernel or `platform-run ui` owns: a lean `mlflow server` on a free loopback
port that lives as long as the process that started it; jupyter_proxy.py makes its URL one the
user's browser opens.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
import threading

from platform_plugin.launcher.processes.spawn import Lifeline
from platform_plugin.tracking.server.local import HOST, start_server, stop_server, wait_healthy
from platform_plugin.tracking.sinks.mlflow_sink import sqlite_path, store_lock
from platform_plugin.util.ports import free_port

UI_STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL, for a UI whose owner died
_UI: dict[str, OwnedUI] = {}  # store uri -> its UI: one per store per kernel
_STARTING = threading.Lock()  # %dist_compare starts it in a thread: one start at a time


class OwnedUI:
    """A lean MLflow UI server that lives as long as the process that started it. `stop()`
    ends it; when this process dies without stopping it (a SIGKILLed kernel, a closed
    terminal: atexit never runs) its lifeline (launcher/processes/spawn.py, the one the ranks have)
    stops the server's process group, which holds uvicorn's worker too (the server runs in a
    session of its own)."""

    def __init__(self, store_uri: str, port: int, log_path: str, nice: int = 0) -> None:
        self.port, self.log_path = port, log_path
        self._stopped = False
        # `mlflow server` creates and migrates a fresh sqlite store as it starts: never while a
        # job's writer does (their race corrupts it). The store's lock (the writers' one,
        # tracking/sinks/mlflow_sink.store_lock) is taken first - a writer's migration ends -
        # and held until the server answers when the store is still to be made
        self._opening = contextlib.ExitStack()
        with contextlib.suppress(OSError):  # no lock file there (a read-only folder): none held
            self._opening.enter_context(store_lock(store_uri))
        if not fresh_sqlite_store(store_uri):
            self._opening.close()  # made and migrated by its writer: the server only reads it
        self._lifeline = Lifeline.for_groups(UI_STOP_GRACE_S)  # first: no moment without it
        try:
            self.proc = start_server(store_uri, port, log_path=log_path, nice=nice)
        except BaseException:
            self._lifeline.release()
            self._opening.close()
            raise
        self._lifeline.add(self.proc.pid)  # pid == pgid: start_new_session

    def wait_healthy(self) -> None:
        try:
            wait_healthy(f"http://{HOST}:{self.port}", self.proc, log_path=self.log_path)
        except BaseException:
            self.stop()
            raise
        finally:
            self._opening.close()

    def stop(self) -> None:
        """Idempotent (atexit, an error path and a `finally` may each call it)."""
        if self._stopped:
            return
        self._stopped = True
        stop_server(self.proc)
        self._lifeline.release()
        self._opening.close()


def ensure_ui(store_uri: str, nice: int = 0) -> int:
    """Start (once per kernel and store) a lean MLflow UI on a free loopback port; it stops
    when the kernel exits, however it exits. Returns the port. `nice`: for a new one."""
    with _STARTING:
        return _ensure_ui(store_uri, nice)


def running(store_uri: str) -> bool:
    """Whether this kernel's UI of `store_uri` is up (started early, or by an earlier compare)."""
    known = _UI.get(store_uri)
    return known is not None and known.proc.poll() is None and not _STARTING.locked()


EARLY_AFTER_S = 2.0  # the ranks' processes start first; niced, the UI then yields them the CPU
EARLY_NICE = 10  # the UI started while ranks train yields the CPU to them
STORE_POLL_S = 0.5  # how often the early start looks for the store the job's writer makes


def fresh_sqlite_store(store_uri: str) -> bool:
    """A sqlite store whose file does not exist yet: whoever opens it first creates it."""
    db = sqlite_path(store_uri)
    return db is not None and not db.exists()


def start_early(store_uri: str, job_ended: threading.Event) -> None:
    """While a tracked job runs in a kernel: start its store's UI (once per kernel and store)
    EARLY_AFTER_S after the job's start, at low priority, so that `%dist_compare` after it finds
    the page ready instead of waiting seconds for MLflow's start. Nothing when the job ended
    before (a short job: the UI starts when asked). A sqlite store the job's writer has yet to
    make is left to it (a UI making it would hold the writer for its whole niced start): the UI
    starts once the store is there. A failure is left to `%dist_compare`,
    which starts the UI again and says why it could not."""
    known = _UI.get(store_uri)
    if known is not None and known.proc.poll() is None:
        return

    def start() -> None:
        if job_ended.wait(EARLY_AFTER_S):
            return
        while fresh_sqlite_store(store_uri):  # the job's writer makes it first
            if job_ended.wait(STORE_POLL_S):
                return
        try:
            ensure_ui(store_uri, nice=EARLY_NICE)
        except Exception:  # noqa: BLE001 - said by %dist_compare, which tries again
            pass

    threading.Thread(target=start, name="platform-mlflow-ui-early", daemon=True).start()


def _ensure_ui(store_uri: str, nice: int = 0) -> int:
    known = _UI.get(store_uri)
    if known and known.proc.poll() is None:
        return known.port
    if known:
        known.stop()  # it died on its own: its lifeline goes too
    port = free_port()
    log = os.path.join(tempfile.gettempdir(), f"platform-mlflow-ui-{port}.log")
    ui = OwnedUI(store_uri, port, log, nice)
    ui.wait_healthy()
    atexit.register(ui.stop)
    _UI[store_uri] = ui
    return port
