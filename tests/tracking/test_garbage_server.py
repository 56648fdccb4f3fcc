"""A tracking URI that answers, but not as MLflow: a proxy or another service that replies
200 with JSON to every request. MLflow's client turns any JSON into an (empty) answer, so the
helper created runs with empty ids, "delivered" every point into them and advanced its offsets:
every point was lost while the report said "200 records delivered". Now an id-less answer is an
error: nothing is marked delivered, the points stay in the spool for `platform-run sync`.
A real HTTP server on loopback (stdlib), a real launch."""
from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from platform_plugin.launcher import launch

RANK = ("from platform_plugin import tracking\nt = tracking.get_tracker()\n"
        "for step in range(100):\n    t.log_metric('loss', float(step))\n")


class _AnythingGoes(http.server.BaseHTTPRequestHandler):
    heard: list[tuple[str, bytes]] = []  # (path, body) of every request
    experiments = False  # answer experiment requests as MLflow does (the runs' are garbage)

    def _answer(self) -> None:
        self.heard.append((self.path, self.rfile.read(int(self.headers.get("Content-Length")
                                                          or 0))))
        body = b'{"unexpected": [1, 2, 3]}'
        if self.experiments and "/experiments/" in self.path:
            body = (b'{"experiment_id": "1", "experiment": {"experiment_id": "1", "name": "e", '
                    b'"lifecycle_stage": "active"}}')
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("experiments", [False, True], ids=["garbage", "garbage-runs"])
def test_a_server_that_answers_json_but_not_mlflow_loses_no_point(tracking_env, tmp_path,
                                                                  monkeypatch, experiments):
    """garbage-runs: a server whose experiments look right gives runs without an id: the job
    run's params were sent into that empty id before the id was checked."""
    monkeypatch.setattr(_AnythingGoes, "experiments", experiments)
    monkeypatch.setattr(_AnythingGoes, "heard", [])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AnythingGoes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tracking_env.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{server.server_port}")
        tracking_env.setenv("PLATFORM_TRACKING_DRAIN_TIMEOUT", "3")
        # a notebook's parameters: the job run's params went out with the empty run id
        tracking_env.setenv("PLATFORM_NOTEBOOK_PARAMETERS", '{"lr": 0.1}')
        (tmp_path / "rank.py").write_text(RANK)
        result = launch([sys.executable, "rank.py"], nproc=2, cwd=str(tmp_path),
                        no_system_metrics=True, write=lambda text: None)
        assert result.ok  # training never depends on the tracking server
        assert (result.tracking.delivered, result.tracking.pending) == (0, 200)
        assert result.tracking.wait_ended()
        # sync meets the same server (the helper may not have reached it before its deadline
        # on a loaded machine): nothing delivered, and why
        sync = subprocess.run([str(Path(sys.executable).with_name("platform-run")), "sync",
                               result.job_id, "--wait", "0"], capture_output=True, text=True,
                              timeout=300)
    finally:
        server.shutdown()
        server.server_close()
    assert sync.returncode == 1, sync.stdout + sync.stderr
    assert "delivered 0, pending 200" in sync.stdout, sync.stdout
    assert "does not behave as an MLflow tracking server" in sync.stdout, sync.stdout
    heard = _AnythingGoes.heard
    assert any(path.endswith("/runs/create") for path, _ in heard) or not experiments
    assert not [body for path, body in heard  # nothing sent into a run without an id
                if path.endswith("/runs/log-batch") and not json.loads(body).get("run_id")]
