"""A local `mlflow server` for the UI and for tests: lean settings, loopback only.

Lean = no job-execution workers and one web worker: a fraction of the memory and start-up
time of MLflow's defaults (measured: docs/benchmarks.md, structure section).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

from platform_plugin.errors import PlatformPluginError
from platform_plugin.tracking.sinks.mlflow_sink import sqlite_path
from platform_plugin.util.children import Started, run_in_own_session
from platform_plugin.util.procfs import group_members, parent

HOST = "127.0.0.1"


def server_command(store_uri: str, port: int) -> list[str]:
    mlflow = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow) if mlflow.exists() else "mlflow", "server", "--backend-store-uri", store_uri,
           "--host", HOST, "--port", str(port), "--workers", "1"]
    db = sqlite_path(store_uri)
    if db is not None:  # artifacts of runs created through the server land next to the store
        cmd += ["--artifacts-destination", str(db.parent / "mlartifacts")]
    return cmd


def team_server_command(host: str, port: int, workers: int, artifacts: str,
                        allowed_hosts: str | None = None, bulk: bool = True,
                        auth: bool = False) -> list[str]:
    """`mlflow server` for every server of a job: the store URI comes in the environment
    (MLFLOW_BACKEND_STORE_URI: it holds the database password), artifacts are uploaded through
    the server (--serve-artifacts) into `artifacts`, so ranks on any machine can log them.
    `bulk`: MLflow's app plus the bulk metrics route (bulk_app.py; needs `app_env()`);
    `auth`: that app behind MLflow's basic-auth app (its settings in the environment:
    team_auth.server_env)."""
    mlflow = Path(sys.executable).with_name("mlflow")
    app = (AUTH_APP_NAME if auth else APP_NAME) if bulk else None
    return [str(mlflow) if mlflow.exists() else "mlflow", "server", "--host", host,
            "--port", str(port), "--workers", str(workers), "--serve-artifacts",
            "--artifacts-destination", artifacts] + (
                ["--allowed-hosts", allowed_hosts] if allowed_hosts else []) + (
                ["--app-name", app] if app else [])


# the `mlflow.app` entry points in pyproject.toml
APP_NAME = "platform-bulk"
AUTH_APP_NAME = "platform-bulk-auth"
APPS = {APP_NAME: "platform_plugin.tracking.server.bulk_app:create_app",
        AUTH_APP_NAME: "platform_plugin.tracking.server.bulk_app:create_auth_app"}


def app_env(folder: str | os.PathLike) -> dict[str, str]:
    """Environment for `mlflow server --app-name platform-bulk`. MLflow looks the name up among
    installed `mlflow.app` entry points; when this package runs without its metadata (a
    checkout on PYTHONPATH, an install older than the entry point) a one-entry distribution
    record is written into `folder` and put on the server's PYTHONPATH, with this package."""
    package_root = str(Path(__file__).resolve().parents[3])
    paths = [package_root]
    if not set(APPS) <= {ep.name for ep in entry_points(group="mlflow.app")}:
        info = Path(folder) / "mlflow-app" / "platform_plugin_server_app-1.0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: platform-plugin-server-app\n"
                                       "Version: 1.0\n")
        (info / "entry_points.txt").write_text("[mlflow.app]\n" + "".join(
            f"{name} = {entry}\n" for name, entry in APPS.items()))
        paths.insert(0, str(info.parent))
    return {"PYTHONPATH": os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])}


def start_server(store_uri: str, port: int, *, log_path: str | os.PathLike,
                 command: list[str] | None = None, env: dict | None = None,
                 nice: int = 0) -> subprocess.Popen:
    """Start in its own session so `stop_server` ends the whole tree (uvicorn spawns a worker).
    `nice`: added to its niceness (a UI started while ranks train yields the CPU to them)."""
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", **(env or {}))
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(command or server_command(store_uri, port), stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=(lambda: os.nice(nice)) if nice else None)
    finally:
        log.close()


def wait_healthy(url: str, proc: subprocess.Popen, *, timeout: float = 120,
                 log_path: str | os.PathLike | None = None) -> None:
    import requests
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if requests.get(f"{url}/health", timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    tail = Path(log_path).read_text(errors="replace")[-2000:] if log_path else ""
    stop_server(proc)
    raise PlatformPluginError(f"mlflow server at {url} did not become healthy "
                              f"(exit code {proc.returncode}).\n{tail}")


def stop_server(proc: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM to the server's session, SIGKILL to what is left after `grace`. `mlflow server`
    is a CLI process whose web server (uvicorn and its workers) runs as its children: once
    they have ended, the server has shut down and all the CLI process still does is its own
    interpreter teardown - the final garbage collection of everything `import mlflow` made,
    3.6-4.2 s on this machine - which is cut with SIGKILL once the CLI process has reaped them
    (it is past waiting for its server), so Ctrl-C on `platform-run ui` or `server` ends when
    the server has. A leader that had no children when it was told to stop (a server that
    serves in-process) gets all of `grace` for its own shutdown."""
    if proc.poll() is None:
        served_by_children = _others_in_group(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline and not (
                served_by_children and _server_ended(proc.pid)):
            time.sleep(0.05)
    try:  # what is left: the CLI's teardown, workers left in the session, a server past `grace`
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _others_in_group(leader: int) -> bool:
    """A live process of the leader's session group besides the leader (its server, workers)."""
    return group_members({leader}).get(leader, []) != [leader]


def _server_ended(leader: int) -> bool:
    """The leader's server has shut down and the leader has seen it end: nothing else of its
    group lives, and the leader has no child left, not even a zombie (it has reaped its
    server: whatever it does after waiting for it has begun, and for MLflow that is exiting)."""
    if _others_in_group(leader):
        return False
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and parent(int(entry)) == leader:
                return False
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return True


def start_team_server(store_uri: str, host: str, port: int, *, workers: int, artifacts: str,
                      folder: str | os.PathLike, allowed_hosts: str | None = None,
                      bulk: bool = True, auth_env: dict[str, str] | None = None
                      ) -> subprocess.Popen:
    """`platform-run server`'s MLflow (also the tests' and the benchmark's): the store URI in
    the environment, the bulk route's app found through `app_env`, log in `folder`.
    `auth_env`: MLflow's basic-auth settings (team_auth.server_env), None for no auth."""
    env = {"MLFLOW_BACKEND_STORE_URI": store_uri, **(app_env(folder) if bulk else {}),
           **(auth_env or {})}
    return start_server("", port, log_path=Path(folder) / "mlflow-server.log", env=env,
                        command=team_server_command(host, port, workers, artifacts, allowed_hosts,
                                                    bulk=bulk, auth=auth_env is not None))


# MLflow's schema (and the auth app's users and admin) made or migrated before the server
# starts, so `platform-run server` can say that this is what takes the time on a new database.
# The default artifact root is the one `mlflow server --serve-artifacts` gives the store.
MIGRATE = """import os
from mlflow.server.handlers import initialize_backend_stores
initialize_backend_stores(os.environ["MLFLOW_BACKEND_STORE_URI"],
                          default_artifact_root="mlflow-artifacts:/")
if os.environ.get("MLFLOW_AUTH_CONFIG_PATH"):
    from mlflow.server.auth import bootstrap_admin_user
    bootstrap_admin_user()
"""


def migrate_team_stores(store_uri: str, *, folder: str | os.PathLike,
                        auth_env: dict[str, str] | None = None,
                        started: Started | None = None) -> None:
    """Create or upgrade the tracking store's schema and the auth app's database (secrets in
    the environment only); its output goes to the server's log. `started`: the caller's
    lifeline gets the migration's process group before it is waited for (util/children.py)."""
    env = dict(os.environ, MLFLOW_BACKEND_STORE_URI=store_uri, **(auth_env or {}))
    log_path = Path(folder) / "mlflow-server.log"
    with open(log_path, "ab") as log:
        done = run_in_own_session([sys.executable, "-c", MIGRATE], started, stdout=log,
                                  stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise PlatformPluginError(f"MLflow's schema could not be prepared (exit "
                                  f"{done.returncode}); the end of {log_path}:\n{tail}")
