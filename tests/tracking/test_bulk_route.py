"""The team server's bulk metrics route (tracking/server/bulk_app.py) against a real `mlflow server`
on a real PostgreSQL (the session fixture `postgres_mlflow`, started as `platform-run server`
starts it): it stores exactly the rows MLflow's log_batch stores, a replay adds nothing, an
unknown or deleted run is refused with MLflow's error codes; against a plain `mlflow server`
the sink falls back to log_batch and says so once; 4 launchers x 8 ranks into one server store
every point once."""
from __future__ import annotations

import json
import os
import uuid

import pytest

from tests.helpers import ASSETS, clean_env, wait_for
from tests.launcher.helpers import PY, finish_all, start_cli
from tests.tracking.helpers import body_limit_proxy, client, make_plan, mlflow_server
from platform_plugin.tracking.server.bulk_app import ROUTE
from platform_plugin.tracking.sinks.mlflow_bulk import BulkRoute, MlflowRequests
from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
from platform_plugin.util.ports import free_port

pytestmark = pytest.mark.slow
RANK = str(ASSETS / "launch" / "server_rank.py")
POINTS = [("loss", 0.5, 0, 1000), ("loss", float("nan"), 1, 1001), ("loss", float("inf"), 2, 1002),
          ("loss", -float("inf"), 3, 1003), ("loss", 0.25, 3, 1003), ("acc", 0.1, 7, 5),
          ("acc", 0.9, 2, 9), ("acc", 0.9, 2, 9)]  # the last one twice: stored once


def rows(pg_uri: str, run_id: str) -> tuple[list, list]:
    """(metrics rows, latest_metrics rows) of a run, without the run id, sorted."""
    import sqlalchemy
    engine = sqlalchemy.create_engine(pg_uri)
    try:
        with engine.connect() as conn:
            return tuple(sorted(tuple(r) for r in conn.execute(sqlalchemy.text(
                f"SELECT key, value, timestamp, step, is_nan FROM {table} WHERE run_uuid = :r"),
                {"r": run_id})) for table in ("metrics", "latest_metrics"))
    finally:
        engine.dispose()


def test_bulk_route_stores_what_log_batch_stores_and_a_replay_adds_nothing(postgres_mlflow):
    from mlflow.entities import Metric
    c = client(postgres_mlflow)
    experiment = c.create_experiment(f"bulk-{uuid.uuid4().hex[:8]}")
    theirs, ours = (c.create_run(experiment).info.run_id for _ in range(2))
    c.log_batch(theirs, metrics=[Metric(k, v, t, s) for k, v, s, t in POINTS])
    route = BulkRoute()
    assert route.available(MlflowRequests(c), postgres_mlflow)
    route.post(MlflowRequests(c), postgres_mlflow, ours, POINTS[:3])
    route.post(MlflowRequests(c), postgres_mlflow, ours, POINTS)  # a replay of the first three plus the rest
    stored = rows(postgres_mlflow.pg_uri, ours)
    assert stored == rows(postgres_mlflow.pg_uri, theirs)
    assert len(stored[0]) == 7 and len(stored[1]) == 2
    route.post(MlflowRequests(c), postgres_mlflow, ours, POINTS)  # an exact replay
    assert rows(postgres_mlflow.pg_uri, ours) == stored
    assert c.get_run(ours).data.metrics == c.get_run(theirs).data.metrics


def test_bulk_route_refuses_unknown_and_deleted_runs_and_bad_bodies(postgres_mlflow):
    from mlflow.exceptions import MlflowException
    from mlflow.utils.rest_utils import http_request
    c = client(postgres_mlflow)
    route = BulkRoute()
    with pytest.raises(MlflowException, match="Run with id=0123abc not found") as unknown:
        route.post(MlflowRequests(c), postgres_mlflow, "0123abc", POINTS[:1])
    assert unknown.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    run = c.create_run(c.create_experiment(f"bulk-{uuid.uuid4().hex[:8]}")).info.run_id
    c.delete_run(run)
    with pytest.raises(MlflowException, match="must be in the 'active' state") as deleted:
        route.post(MlflowRequests(c), postgres_mlflow, run, POINTS[:1])
    assert deleted.value.error_code == "INVALID_PARAMETER_VALUE"  # permanent for the forwarder
    active = c.create_run(c.get_run(run).info.experiment_id).info.run_id
    with pytest.raises(MlflowException, match="must not resolve to other names"):
        route.post(MlflowRequests(c), postgres_mlflow, active, [("bad/../name", 1.0, 0, 1)])
    creds = c._tracking_client.store.get_host_creds()
    bad = http_request(creds, "/platform/api/metrics/bulk", "POST", data="{\"runs\": 3}",
                       extra_headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and "INVALID_PARAMETER_VALUE" in bad.text
    # points are checked where the writer converts them: each malformed one refuses the request
    for point in (["loss", "x", 0, 1], ["loss", 1.0], [5, 1.0, 0, 1], {"k": 1}, ["loss", None, 0, 1]):
        body = json.dumps({"runs": [{"run_id": active, "metrics": [["ok", 1.0, 0, 1], point]}]})
        refused = http_request(creds, "/platform/api/metrics/bulk", "POST", data=body,
                               extra_headers={"Content-Type": "application/json"})
        assert refused.status_code == 400 and "INVALID_PARAMETER_VALUE" in refused.text, point
    assert rows(postgres_mlflow.pg_uri, active) == ([], [])  # nothing of a refused request stored


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


# a valid point first: a refused request stores nothing of it either
REFUSED = {
    "step 1e23": ["loss", 1.0, 1e23, 1],
    "step 2**63": ["loss", 1.0, 2 ** 63, 1],
    "step below int64": ["loss", 1.0, -2 ** 63 - 1, 1],
    "step 1.5": ["loss", 1.0, 1.5, 1],
    "timestamp 1e30": ["loss", 1.0, 0, 1e30],
    "timestamp 2**63": ["loss", 1.0, 0, 2 ** 63],
    "negative timestamp": ["loss", 1.0, 0, -1],
    "300-character name": ["n" * 300, 1.0, 0, 1],
    "100,000-character name": ["n" * 100_000, 1.0, 0, 1],
    "name with a NUL": ["lo\x00ss", 1.0, 0, 1],
    "name no string": [5, 1.0, 0, 1],
    "value a string": ["loss", "x", 0, 1],
    "value null": ["loss", None, 0, 1],
    "value a bool": ["loss", True, 0, 1],
    "value of 401 digits": ["loss", 10 ** 400, 0, 1],
    "value of -401 digits": ["loss", -10 ** 400, 0, 1],
    "value a list 900 deep": ["loss", _nested(900), 0, 1],
    "name a list 900 deep": [_nested(900), 1.0, 0, 1],
    "step of 4,000 digits": ["loss", 1.0, 10 ** 3999, 1],
    "three fields": ["loss", 1.0, 0],
    "no list": {"k": 1},
}


@pytest.mark.parametrize("point", list(REFUSED.values()), ids=list(REFUSED))
def test_bulk_route_refuses_what_mlflow_refuses_with_its_400_before_the_database(postgres_mlflow, point):
    from mlflow.utils.rest_utils import http_request
    c = client(postgres_mlflow)
    run = c.create_run(c.create_experiment(f"bulk-{uuid.uuid4().hex[:8]}")).info.run_id
    body = json.dumps({"runs": [{"run_id": run, "metrics": [["ok", 1.0, 0, 1], point]}]})
    logged = os.path.getsize(postgres_mlflow.log_path)
    answer = http_request(c._tracking_client.store.get_host_creds(), ROUTE, "POST", data=body,
                          extra_headers={"Content-Type": "application/json"}, max_retries=0)
    assert answer.status_code == 400, answer.text[:500]
    error = answer.json()  # MLflow's error body
    assert error["error_code"] == "INVALID_PARAMETER_VALUE" and error["message"]
    assert len(answer.text) < 2000  # a 100,000-character name is not echoed back
    assert rows(postgres_mlflow.pg_uri, run) == ([], [])
    with open(postgres_mlflow.log_path, "rb") as log:
        log.seek(logged)  # what the server logged of this request
        assert b"Traceback" not in log.read()


def _raw_bodies(run: str) -> dict[str, bytes]:
    """Bodies no JSON shape of the route fits, each a refusal of its own kind."""
    point = '["ok", 1.0, 0, 1]'
    return {
        "100,000 deep": b"[" * 100_000 + b"]" * 100_000,
        "100,000 deep objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        "deep inside a point": ('{"runs": [{"run_id": "%s", "metrics": [%s, %s]}]}'
                                % (run, point, "[" * 100_000 + "]" * 100_000)).encode(),
        "5,000-digit value": ('{"runs": [{"run_id": "%s", "metrics": [["loss", %s, 0, 1]]}]}'
                              % (run, "9" * 5000)).encode(),
        "run id a deep list": ('{"runs": [{"run_id": %s, "metrics": [%s]}]}'
                               % ("[" * 900 + "]" * 900, point)).encode(),
        "run id a number": ('{"runs": [{"run_id": %s, "metrics": [%s]}]}'
                            % ("9" * 4000, point)).encode(),
        "not UTF-8": b'{"runs": [{"run_id": "\xff\xfe", "metrics": []}]}',
        "runs a string": b'{"runs": "abc"}',
        "a list": b"[1, 2]",
        "empty": b"",
    }


@pytest.mark.parametrize("kind", list(_raw_bodies("r")), ids=list(_raw_bodies("r")))
def test_bulk_route_answers_400_for_every_body_it_cannot_take_without_a_traceback(
        postgres_mlflow, kind):
    """A 100,000-deep body was a RecursionError and a 401-digit value an OverflowError: HTTP 500
    and a traceback in the server's log. Every body the route cannot take is MLflow's 400."""
    from mlflow.utils.rest_utils import http_request
    c = client(postgres_mlflow)
    run = c.create_run(c.create_experiment(f"bulk-{uuid.uuid4().hex[:8]}")).info.run_id
    logged = os.path.getsize(postgres_mlflow.log_path)
    answer = http_request(c._tracking_client.store.get_host_creds(), ROUTE, "POST",
                          data=_raw_bodies(run)[kind], max_retries=0,
                          extra_headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text[:500]
    assert answer.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert len(answer.text) < 2000, answer.text[:300]
    assert rows(postgres_mlflow.pg_uri, run) == ([], [])
    with open(postgres_mlflow.log_path, "rb") as log:
        log.seek(logged)
        assert b"Traceback" not in log.read()


def test_bulk_route_refuses_a_run_id_mlflow_could_not_have_made(postgres_mlflow):
    from mlflow.utils.rest_utils import http_request
    c = client(postgres_mlflow)
    body = json.dumps({"runs": [{"run_id": "x" * 300 + "\x00", "metrics": [["ok", 1.0, 0, 1]]}]})
    answer = http_request(c._tracking_client.store.get_host_creds(), ROUTE, "POST", data=body,
                          extra_headers={"Content-Type": "application/json"}, max_retries=0)
    assert answer.status_code == 400 and answer.json()["error_code"] == "INVALID_PARAMETER_VALUE"


def test_plain_mlflow_server_falls_back_to_log_batch_and_says_so_once(tmp_path, capfd):
    with mlflow_server(tmp_path) as server:
        sink = MlflowSink()
        c = sink.client(server.url)
        run = c.create_run(c.create_experiment("plain")).info.run_id
        for chunk in (POINTS[:4], POINTS[4:]):
            assert sink._log_points(server.url, run, chunk)  # MLflow Metrics for log_batch
        metrics = sink._log_points(server.url, run, POINTS)
        c.log_batch(run, metrics=metrics)
        assert c.get_run(run).data.metrics == {"loss": 0.25, "acc": 0.1}  # greatest step wins
        assert len(c.get_metric_history(run, "loss")) == 5
    err = capfd.readouterr().err
    assert err.count("has no bulk metrics route") == 1 and "log_batch" in err


def test_four_launchers_of_eight_ranks_store_every_point_once(tmp_path, postgres_mlflow):
    steps, experiment = 500, f"bulk4x8-{uuid.uuid4().hex[:8]}"
    env = clean_env(MLFLOW_TRACKING_URI=postgres_mlflow, MLFLOW_EXPERIMENT_NAME=experiment,
                    PLATFORM_TRACKING_DRAIN_TIMEOUT="120")
    port = free_port()
    procs = [start_cli(["--tracking", "mlflow", "--nproc", "8", "--nnodes", "4", "--node-rank",
                        str(n), "--master-port", str(port), "--backend", "plain", "--show", "none",
                        "--no-system-metrics", "--", PY, RANK, "train", str(steps)],
                       tmp_path / f"server{n}", cwd=str(tmp_path), env=env)
             for n in range(4)]
    outs = finish_all(procs, timeout=240)
    assert [code for code, _ in outs] == [0] * 4, outs
    import sqlalchemy
    engine = sqlalchemy.create_engine(postgres_mlflow.pg_uri)
    with engine.connect() as conn:
        total, distinct = conn.execute(sqlalchemy.text(
            "SELECT count(*), count(DISTINCT (m.run_uuid, m.step)) FROM metrics m JOIN runs r "
            "ON m.run_uuid = r.run_uuid JOIN experiments e ON r.experiment_id = e.experiment_id "
            "WHERE e.name = :name AND m.key = 'loss'"), {"name": experiment}).one()
    engine.dispose()
    assert (total, distinct) == (4 * 8 * steps, 4 * 8 * steps)
    logs = [p.read_text() for p in tmp_path.glob("server*/*/tracking/helper.log")]
    assert len(logs) == 4 and not any("has no bulk metrics route" in log for log in logs)
    # the helpers end the runs after the launchers returned: not after the session's server
    wait_for(lambda: all(json.loads(p.read_text())["phase"] == "done"
                         for p in tmp_path.glob("server*/*/tracking/helper.json")),
             timeout=120, interval=0.5, what="the forwarding helpers ended the runs")


def test_a_batch_too_large_for_a_proxy_passes_in_halves_not_point_by_point(tracking_env, tmp_path,
                                                                           postgres_mlflow):
    """A 413 is permanent (resending the same body cannot pass): the forwarder halves the batch
    until the pieces pass - a few requests, where one request per point took thousands."""
    from platform_plugin.tracking.delivery.forwarder import Forwarder
    from platform_plugin.tracking.rank.identity import RankIdentity
    from platform_plugin.tracking.job.handle import JobTracking
    from platform_plugin.tracking.sinks import get_sink
    from platform_plugin.tracking.shared.state import StreamState
    from platform_plugin.tracking.rank.tracker import Tracker
    with body_limit_proxy(40_000, str(postgres_mlflow)) as (uri, posts):
        tracking_env.setenv("MLFLOW_TRACKING_URI", uri)
        tracking_env.setenv("MLFLOW_EXPERIMENT_NAME", f"limit-{uuid.uuid4().hex[:8]}")
        plan = make_plan(tmp_path, 1)
        jt = JobTracking.create("mlflow", plan)
        env = jt.prepare()
        tracker = Tracker(env["PLATFORM_TRACKING_SPOOL_DIR"],
                          RankIdentity.from_env({**plan.ranks[0].env, **env}))
        for step in range(3000):  # ~130 KB as one request
            tracker.log_metric("loss", 1.0 / (step + 1), step=step)
        tracker.close()
        forwarder = Forwarder(jt.spool_dir, jt.config, get_sink(jt.sink))
        assert forwarder.pump(), forwarder.last_error
    counts = forwarder.counts()
    assert (counts.delivered, counts.rejected, counts.pending) == (3000, 0, 0)
    run_id = StreamState.load(jt.spool_dir, "rank_0").run_id
    assert sorted(m.step for m in client(postgres_mlflow).get_metric_history(run_id, "loss")) == \
        list(range(3000))
    bulk = [status for path, _, status in posts if path == ROUTE]
    assert 413 in bulk and bulk.count(200) >= 2 and len(bulk) < 30, bulk
