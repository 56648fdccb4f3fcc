"""The forwarding helper's REST calls (tracking/sinks/mlflow_rest.py) into a server with the bulk
route: the same runs, tags, params, points and ends as through MLflow's client, without MLflow
imported; MLflow's error codes kept; MLflow's credentials from the environment sent; settings it
does not implement leave the sink on MLflow's client."""
from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.helpers import clean_env
from tests.tracking.helpers import body_limit_proxy, client
from platform_plugin.tracking.sinks import mlflow_refusals, mlflow_rest
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
from platform_plugin.tracking.sinks.mlflow_bulk import RestRequests
from platform_plugin.tracking.sinks.mlflow_writers import client_writer

# One job of two ranks through the sink, as the forwarding helper drives it; prints what it made
# and whether MLflow was imported. `mlflow-client`: the sink made to use MLflow's client instead.
JOB = """
import json, sys
from pathlib import Path
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
from platform_plugin.tracking.sinks.mlflow_writers import client_writer
from platform_plugin.tracking.shared.state import SinkConfig, StreamState
spool, uri, experiment, source, mode = Path(sys.argv[1]), *sys.argv[2:]
spool.mkdir(parents=True)  # <tmp>/<mode>/tracking: the rank logs beside it, as in a job folder
for l in "01":
    (spool.parent / f"rank_{l}.log").write_text(f"rank {l} says hello\\n" * (1 + int(l)))
ranks = {l: {"rank_id": int(l), "device_id": int(l), "server_id": "s1", "host": "h",
             "log_path": str(spool.parent / f"rank_{l}.log")} for l in "01"}
config = SinkConfig("mlflow", tracking_uri=uri, experiment_name=experiment, ranks=ranks, job={
    "job_id": "train-1", "job_name": "train", "run_name": "train-1", "parent": True, "user": "alice",
    "source": source, "source_type": "LOCAL", "tags": {"backend": "plain"}, "params": {"lr": "0.1"}})
sink = MlflowSink()
if mode == "mlflow-client":
    sink._writers[uri] = client_writer(sink.client(uri), uri, sink._bulk)
assert sink.unavailable(config) is None
sink.ensure_runs(config, spool, ["0", "1"])
states = {l: StreamState.load(spool, "rank_" + l) for l in "01"}
sink.deliver_round(config, [(l, states[l], [["m", "loss", 0.5 * s, s, 1000 + s] for s in range(3)])
                            for l in "01"])
sink.deliver(config, "0", states["0"], [["p", "batch", "32"], ["t", "phase", "warm"],
                                        ["m", "acc", 0.9, 1, 2000]])
ended = sink.end_job(config, spool, {})
print(json.dumps({"mlflow": "mlflow" in sys.modules, "parent": config.parent_run_id,
                  "ranks": {l: states[l].run_id for l in "01"}, "ended": ended}))
"""
VOLATILE = ("mlflow.source.git.commit", "mlflow.source.git.branch")


def run_job(tmp_path, uri: str, mode: str) -> dict:
    experiment = f"rest-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-c", JOB, str(tmp_path / mode / "tracking"), uri, experiment,
                           str(tmp_path), mode], env=clean_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def described(c, made: dict) -> dict:
    """What a job left in the store, without ids and times."""
    def run(run_id: str) -> dict:
        got = c.get_run(run_id)
        tags = {k: v for k, v in got.data.tags.items() if k not in VOLATILE}
        if tags.get("mlflow.parentRunId") == made["parent"]:
            tags["mlflow.parentRunId"] = "<parent>"
        history = {key: [(m.step, m.value, m.timestamp) for m in c.get_metric_history(run_id, key)]
                   for key in got.data.metrics}
        logs = [(a.path, a.file_size) for a in c.list_artifacts(run_id, "logs")]
        return {"status": got.info.status, "name": got.info.run_name, "tags": tags, "logs": logs,
                "params": got.data.params, "metrics": history, "user": got.info.user_id}
    parent = c.get_run(made["parent"])
    kind = c.get_experiment(parent.info.experiment_id).tags.get("mlflow.experimentKind")
    return {"parent": run(made["parent"]), "kind": kind,
            "ranks": {label: run(run_id) for label, run_id in made["ranks"].items()}}


@pytest.mark.slow
def test_rest_calls_make_what_mlflows_client_makes_without_importing_mlflow(tmp_path, postgres_mlflow):
    rest = run_job(tmp_path, postgres_mlflow, "rest")
    theirs = run_job(tmp_path, postgres_mlflow, "mlflow-client")
    assert rest["mlflow"] is False and theirs["mlflow"] is True  # the REST path never imported it
    assert rest["ended"] and theirs["ended"]
    c = client(postgres_mlflow)
    ours = described(c, rest)
    assert ours == described(c, theirs)
    assert ours["parent"]["status"] == "FINISHED" and ours["parent"]["params"] == {"lr": "0.1"}
    assert ours["parent"]["tags"]["platform.role"] == "job" and ours["kind"]
    rank0 = ours["ranks"]["0"]
    assert rank0["tags"]["mlflow.parentRunId"] == "<parent>" and rank0["name"] == "rank-00"
    assert rank0["params"] == {"batch": "32"} and rank0["tags"]["phase"] == "warm"
    assert rank0["metrics"]["loss"] == [(0, 0.0, 1000), (1, 0.5, 1001), (2, 1.0, 1002)]
    assert rank0["user"] == "alice" and rank0["status"] == "FINISHED"
    assert rank0["logs"] == [("logs/rank_0.log", 18)] and ours["ranks"]["1"]["logs"] == [("logs/rank_1.log", 36)]


@pytest.mark.slow
def test_rest_errors_keep_mlflows_codes_and_the_sink_judges_them_alike(postgres_mlflow):
    rest = mlflow_rest.RestClient(postgres_mlflow)
    name = f"rest-{uuid.uuid4().hex[:8]}"
    assert rest.get_experiment_by_name(name) is None
    experiment = rest.create_experiment(name)
    with pytest.raises(mlflow_rest.RestError) as twice:
        rest.create_experiment(name)
    assert twice.value.error_code == "RESOURCE_ALREADY_EXISTS"
    with pytest.raises(mlflow_rest.RestError) as unknown:
        rest.get_run("0123abc")
    assert unknown.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    run = rest.create_run(experiment).info.run_id
    rest.delete_run(run)
    sink = MlflowSink()
    with pytest.raises(mlflow_rest.RestError) as deleted:
        sink._bulk.post(RestRequests(rest.transport), postgres_mlflow, run, [("loss", 1.0, 0, 1)])
    assert deleted.value.error_code == "INVALID_PARAMETER_VALUE"
    # both refusals are the run's, for good: its records are set aside, a batch at a time
    assert sink.is_permanent(deleted.value) and sink.is_permanent(unknown.value)
    assert sink.refuses_run(deleted.value) and sink.refuses_run(unknown.value)
    assert not sink.refuses_run(twice.value)


class _Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_credentials_come_from_mlflows_variables_and_unsupported_settings_keep_mlflows_client(
        tmp_path, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("HOME", str(tmp_path))
    try:
        for env in ({"MLFLOW_TRACKING_USERNAME": "ann", "MLFLOW_TRACKING_PASSWORD": "s3cret"},
                    {"MLFLOW_TRACKING_TOKEN": "tok"}, {}):
            assert mlflow_rest.Transport(uri, env).healthy() is None
        (tmp_path / ".mlflow").mkdir()
        (tmp_path / ".mlflow" / "credentials").write_text(
            "[mlflow]\nmlflow_tracking_username = bob\nmlflow_tracking_password = pw\n")
        assert mlflow_rest.Transport(uri, {}).healthy() is None
    finally:
        server.shutdown()
    basic = "Basic " + base64.standard_b64encode(b"ann:s3cret").decode()
    from_file = "Basic " + base64.standard_b64encode(b"bob:pw").decode()
    assert _Recorder.seen == [basic, "Bearer tok", None, from_file]
    assert mlflow_rest.usable(uri, {}) and not mlflow_rest.usable("sqlite:///x.db", {})
    for name in mlflow_rest.UNSUPPORTED_ENV:
        assert not mlflow_rest.usable(uri, {name: "true"})


def test_the_health_probe_and_the_rest_client_share_one_transport_per_server(monkeypatch):
    """Each Transport reads the credentials (a file, maybe) and makes a TLS context: once a server."""
    from platform_plugin.tracking.shared.state import SinkConfig
    made = []
    monkeypatch.setattr(mlflow_rest.Transport, "__init__", _counting(made))
    sink = MlflowSink()
    with body_limit_proxy(0) as (uri, _):  # answers every GET as the team server: healthy
        assert sink.unavailable(SinkConfig("mlflow", tracking_uri=uri)) is None
        api = sink.writer(uri).runs  # the bulk route answered: the sink's REST client
        assert sink.unavailable(SinkConfig("mlflow", tracking_uri=uri)) is None
    assert isinstance(api, mlflow_rest.RestClient) and len(made) == 1
    assert api.transport is made[0]


def _counting(made: list):
    original = mlflow_rest.Transport.__init__

    def init(self, *args, **kwargs):
        made.append(self)
        original(self, *args, **kwargs)
    return init


@pytest.mark.parametrize("mode", ["rest", "mlflow-client"])
def test_a_413_on_the_bulk_route_is_permanent_through_either_client(tmp_path, mode):
    """Resending a body the server refuses as too large can never succeed: the forwarder must
    hear "permanent" (and send the batch in halves) from MLflow's client too, not retry the
    same batch until the drain deadline."""
    from platform_plugin.tracking.shared.state import SinkConfig, StreamState
    sink = MlflowSink()
    with body_limit_proxy(0) as (uri, _):  # the probe answered, every POST refused: 413
        if mode == "mlflow-client":  # what a server without the REST path gets (mlflow_rest.usable)
            sink._writers[uri] = client_writer(sink.client(uri), uri, sink._bulk)
        config = SinkConfig("mlflow", tracking_uri=uri, experiment_id="1")
        with pytest.raises(Exception) as refused:
            sink.deliver(config, "0", StreamState(run_id="abc"), [["m", "loss", 0.5, 1, 1000]])
    assert "413" in str(refused.value)
    assert isinstance(sink._writers[uri].runs, mlflow_rest.RestClient) == (mode == "rest")
    assert sink.is_permanent(refused.value)
    assert refused.value.status_code == 413  # one name for the HTTP status on both clients' errors


def test_a_413_on_mlflow_log_batch_through_mlflow_client_is_permanent():
    """A plain `mlflow server` behind a proxy with a body limit: MLflow's own client reports the
    proxy's 413 (an HTML page, no MLflow JSON) as INTERNAL_ERROR with the status only in its
    message text. Judged transient, the same batch was resent until the drain deadline and then
    by every `sync`; permanent, the forwarder sends it in halves."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric
    with body_limit_proxy(0) as (uri, posts):  # every POST refused as too large
        with pytest.raises(Exception) as refused:
            MlflowClient(tracking_uri=uri).log_batch("abc", metrics=[Metric("loss", 0.5, 1000, 1)])
    assert posts and posts[-1][2] == 413  # the refusal really came from the proxy
    assert "413" in str(refused.value)
    assert MlflowSink().is_permanent(refused.value)
    assert mlflow_refusals.http_status(refused.value) == 413


def test_other_mlflow_client_failures_stay_transient():
    """The status found in MLflow's message must not turn a server's 503 or a dropped connection
    into "permanent" (the batch would be split and retried as refused records)."""
    from mlflow.exceptions import MlflowException
    busy = MlflowException("API request to endpoint /api/2.0/mlflow/runs/log-batch failed with "
                           "error code 503 != 200. Response body: 'busy'")
    assert mlflow_refusals.http_status(busy) == 503 and not MlflowSink().is_permanent(busy)
    assert mlflow_refusals.http_status(ConnectionError("reset")) is None


def test_a_refusal_of_the_credentials_says_what_to_fix_from_either_clients_error():
    """HTTP 401/403 as the REST client (error_of) and MLflow's client (verify_rest_response,
    on the basic-auth app's plain-text answer) raise them: not a refusal of the records (the
    forwarder would set them aside) but of the credentials, with what to set where."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import PERMISSION_DENIED, UNAUTHENTICATED
    uri = "http://127.0.0.1:1"
    rest_401 = mlflow_rest.error_of("POST", "/api/2.0/mlflow/runs/create", 401,
                                    b"You are not authenticated. Please see ...")
    client_401 = MlflowException("API request to endpoint /api/2.0/mlflow/runs/search failed "
                                 "with error code 401 != 200", error_code=UNAUTHENTICATED)
    for refused in (rest_401, client_401):
        none = mlflow_refusals.access_refusal(refused, uri, {})
        assert none and "requires credentials (HTTP 401)" in none and uri in none
        assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in none
        assert "platform-run server" in none and ".env" in none
        wrong = mlflow_refusals.access_refusal(refused, uri, {"MLFLOW_TRACKING_USERNAME": "bob",
                                                          "MLFLOW_TRACKING_PASSWORD": "secret"})
        assert "refused the credentials of user 'bob'" in wrong and "secret" not in wrong
        assert not MlflowSink().is_permanent(refused)  # the records wait; never set aside
    client_403 = MlflowException("Permission denied", error_code=PERMISSION_DENIED)
    for refused in (mlflow_rest.error_of("POST", "/platform/api/metrics/bulk", 403,
                                         b"Permission denied"), client_403):
        denied = mlflow_refusals.access_refusal(refused, uri, {"MLFLOW_TRACKING_USERNAME": "bob"})
        assert "refused user 'bob' (HTTP 403 PERMISSION_DENIED)" in denied and "EDIT" in denied
    for other in (mlflow_rest.error_of("POST", "/x", 500, b"boom"), ConnectionError("reset"),
                  mlflow_rest.error_of("POST", "/x", 400, b'{"error_code": "BAD_REQUEST"}')):
        assert mlflow_refusals.access_refusal(other, uri, {}) is None
