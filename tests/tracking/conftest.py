"""Fixtures of the tracking tests."""
from __future__ import annotations

import os

import pytest

from tests.tracking.helpers import STANDIN_PATH


@pytest.fixture
def tracking_env(clean_environ, tmp_path):
    """Clean platform variables, work in tmp_path, wflogger STAND-IN importable by name only
    when a test adds it. The drain is a bound, not a wait: it ends as soon as everything is
    delivered, so it is generous for a loaded machine; tests of a dead sink set a short one."""
    clean_environ.chdir(tmp_path)
    clean_environ.setenv("PLATFORM_LOG_DIR", str(tmp_path / "platform_logs"))
    clean_environ.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "120")
    clean_environ.delenv("PLATFORM_TRACKING", raising=False)
    return clean_environ


@pytest.fixture
def wflogger_standin(tracking_env, tmp_path, monkeypatch):
    """Make the platform's private wflogger SDK importable as a STAND-IN that records every call
    (tests/assets/tracking/wf_analyse); forgotten again afterwards so `auto` picks MLflow in the
    next test. Yields the file of recorded calls."""
    import os
    import sys
    monkeypatch.syspath_prepend(STANDIN_PATH)
    # the forwarding helper is a process of its own: it finds the STAND-IN through PYTHONPATH
    tracking_env.setenv("PYTHONPATH", os.pathsep.join(p for p in (STANDIN_PATH, os.environ.get("PYTHONPATH")) if p))
    calls = tmp_path / "wflogger_calls.jsonl"
    tracking_env.setenv("WFLOGGER_STANDIN_LOG", str(calls))
    yield calls
    for name in [m for m in sys.modules if m == "wf_analyse" or m.startswith("wf_analyse.")]:
        del sys.modules[name]


class ServerUri(str):
    """The tracking URI, carrying the database URI behind the server (`pg_uri`) and the
    server's log (`log_path`)."""
    pg_uri = ""
    log_path = ""


@pytest.fixture(scope="session")
def postgres_mlflow():
    """A real PostgreSQL cluster (initdb'd for this session in a temporary folder, on a free
    loopback port) behind a real `mlflow server` with 1 worker, served artifacts and the bulk route, as
    `platform-run server` runs them. Yields the tracking URI; both are stopped at the end.
    Skips (with the reason) only when PostgreSQL's binaries are not installed."""
    import shutil
    import tempfile

    from platform_plugin.tracking.server.postgres import LocalPostgres, missing_reason
    from platform_plugin.tracking.server.local import start_team_server, stop_server, wait_healthy
    from platform_plugin.util.ports import free_port
    why = missing_reason()
    if why:
        pytest.skip(why)
    root = tempfile.mkdtemp(prefix="platform-pg-")  # /tmp: the postgres user can reach it
    os.chmod(root, 0o755)
    pg = LocalPostgres(os.path.join(root, "data"), free_port())
    proc = None
    try:
        pg.start()
        port = free_port()
        proc = start_team_server(pg.uri, "127.0.0.1", port, workers=1,
                                 artifacts=os.path.join(root, "artifacts"), folder=root)
        uri = ServerUri(f"http://127.0.0.1:{port}")
        uri.pg_uri = pg.uri  # the bulk route's tests compare rows in the database
        uri.log_path = os.path.join(root, "mlflow-server.log")  # ... and look for tracebacks
        wait_healthy(uri, proc, log_path=os.path.join(root, "mlflow-server.log"), timeout=180)
        yield uri
    finally:
        if proc is not None:
            stop_server(proc)
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
