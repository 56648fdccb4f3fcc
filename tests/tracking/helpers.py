"""Fixtures and helpers for the tracking tests (issue #4): real MLflow stores and servers,
plans built from the launcher's dataclasses, spool inspection."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.helpers import ASSETS as ASSETS_ROOT
from tests.helpers import wait_for  # noqa: F401  (the tests' one wait_for, re-exported)
from platform_plugin.launcher.planning.plan import LaunchPlan, RankSpec
from platform_plugin.tracking.server.local import HOST, start_server, stop_server, wait_healthy

ASSETS = ASSETS_ROOT / "tracking"
STANDIN_PATH = str(ASSETS)  # holds the wflogger STAND-IN package `wf_analyse`


def client(uri: str):
    from mlflow.tracking import MlflowClient
    return MlflowClient(tracking_uri=uri)


def make_plan(tmp_path: Path, n: int = 2, *, job_name: str = "train", command=("python", "train.py"),
              env: dict | None = None) -> LaunchPlan:
    """A LaunchPlan as the launcher builds it, for JobTracking tests that need no processes."""
    job_id = f"{job_name}-20260101-000000-{os.urandom(2).hex()}"
    job_dir = tmp_path / "platform_logs" / job_id
    job_dir.mkdir(parents=True)
    ranks = []
    for i in range(n):
        log = job_dir / f"rank_{i}.log"
        log.write_text(f"rank {i} says hello\n")
        rank_env = {"RANK_ID": str(i), "DEVICE_ID": str(4 + i), "RANK_SIZE": str(n), "JOB_ID": job_id,
                    "PLATFORM_JOB_NAME": job_name, "PLATFORM_SERVER_ID": "10.0.0.1", **(env or {})}
        ranks.append(RankSpec(name=str(i), rank_id=i, local_rank=i, device_id=4 + i, argv=tuple(command),
                              env=rank_env, cwd=str(tmp_path), log_path=str(log)))
    return LaunchPlan(job_id=job_id, job_name=job_name, job_dir=str(job_dir), backend="plain",
                      backend_reason="test", world_size=n, node_rank=0, nnodes=1, ranks=tuple(ranks),
                      command=tuple(command))


def spool_records(spool_dir: Path, label: str) -> list[list]:
    return [json.loads(x) for x in (spool_dir / f"rank_{label}.jsonl").read_text().splitlines() if x]


def child_runs(mlflow_client, parent_run_id: str):
    parent = mlflow_client.get_run(parent_run_id)
    runs = mlflow_client.search_runs([parent.info.experiment_id],
                                     filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'")
    return sorted(runs, key=lambda r: r.info.run_name)


@contextmanager
def refused_url():
    """An http URL where nobody listens, for "server down" tests: the port stays bound (not
    listening) by this test, so connections are refused and no other process - other tests run
    concurrently - can start listening there meanwhile, as it could on a port merely found free."""
    with socket.socket() as held:  # no SO_REUSEADDR: nobody can listen there meanwhile
        held.bind((HOST, 0))
        yield f"http://{HOST}:{held.getsockname()[1]}"


def hold_port() -> socket.socket:
    """A socket bound (SO_REUSEADDR, never listening) to a free loopback port. A server started
    on that port binds it alongside (uvicorn sets SO_REUSEADDR too), while bind(0) and clients'
    ephemeral ports of other processes (other areas' tests run concurrently) can never be given
    it - unlike a port found free and released, which anyone may take before the server binds.
    Connections to it are refused while no server listens."""
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind((HOST, 0))
    return held


class BodyLimitProxy(BaseHTTPRequestHandler):
    """A STAND-IN for a reverse proxy with a body limit (nginx's client_max_body_size) in front of
    `platform-run server`: a body over `limit` bytes gets the proxy's own 413 page (HTML, not
    MLflow's JSON); the rest is relayed to `upstream` - without one, every request is answered
    as the team server answers the bulk route's probe (and /health)."""
    upstream: str | None = None
    limit = 0
    posts: list = []  # (path, body bytes, status) of every POST

    def _relay(self) -> None:
        from platform_plugin.tracking.server.bulk_app import MAX_POINTS, VERSION
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if len(body) > self.limit:
            status, data, kind = 413, b"<html><h1>413 Request Entity Too Large</h1></html>", "text/html"
        elif self.upstream is None:
            status, data, kind = 200, json.dumps({"version": VERSION, "max_points": MAX_POINTS}).encode(), \
                "application/json"
        else:
            status, data, kind = self._forward(body)
        if self.command == "POST":
            self.posts.append((self.path, len(body), status))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forward(self, body: bytes) -> tuple[int, bytes, str]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        request = urllib.request.Request(f"{self.upstream}{self.path}", data=body or None,
                                         method=self.command, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                return answer.status, answer.read(), answer.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers.get("Content-Type", "")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

    def log_message(self, *args):
        pass


@contextmanager
def body_limit_proxy(limit: int, upstream: str | None = None):
    """Yields (the proxy's URI, its list of POSTs); stopped at the end."""
    handler = type("Proxy", (BodyLimitProxy,), {"upstream": upstream, "limit": limit, "posts": []})
    server = ThreadingHTTPServer((HOST, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}", handler.posts
    finally:
        server.shutdown()
        server.server_close()


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 over a sqlite store; can be killed and restarted on
    the same port. `bulk`: with the bulk metrics route, as `platform-run server` serves it (the
    forwarding helper then talks to it with its REST calls, sinks/mlflow_rest.py).

    The port stays held (`hold_port`) until `close()`: while the server is down a connection is
    refused, exactly as from a dead server, and no other process can take the port before the
    restart."""

    def __init__(self, tmp_path: Path, bulk: bool = False):
        self.store = f"sqlite:///{tmp_path / 'server' / 'mlflow.db'}"
        self.bulk = bulk
        (tmp_path / "server").mkdir(exist_ok=True)
        self.log = tmp_path / "server" / "server.log"
        self._port_hold = hold_port()
        self.port = self._port_hold.getsockname()[1]
        self.url = f"http://{HOST}:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "MlflowServer":
        command, env = None, None
        if self.bulk:
            from platform_plugin.tracking.server.local import APP_NAME, app_env, server_command
            command = server_command(self.store, self.port) + ["--app-name", APP_NAME]
            env = app_env(self.log.parent)
        self.proc = start_server(self.store, self.port, log_path=self.log, command=command, env=env)
        wait_healthy(self.url, self.proc, timeout=180, log_path=self.log)
        return self

    def __enter__(self) -> "MlflowServer":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info) -> None:
        self.close()

    def kill(self) -> None:
        if self.proc is not None:
            stop_server(self.proc, grace=0)
            self.proc = None

    def close(self) -> None:
        self.kill()
        self._port_hold.close()


@contextmanager
def mlflow_server(tmp_path: Path):
    server = MlflowServer(tmp_path)
    try:
        yield server.start()
    finally:
        server.close()
