"""Metric points into an MLflow tracking server through its bulk route, when it has one.

`platform-run server` serves MLflow's app plus `POST /platform/api/metrics/bulk`
(tracking/server/bulk_app.py): 10,000 points a request, stored by one INSERT, instead of `log_batch`'s
1,000 points parsed and written one ORM object at a time. The route is looked up once per
tracking URI (GET); a server without it (a plain `mlflow server`, another team's server) gets
`log_batch`, and the helper's log says so once. Requests go through MLflow's own
HTTP helper with the client's credentials (MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN, TLS
settings, retries), so whatever auth the server has applies the same to both paths.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse
from typing import Any, Iterator, Protocol

from platform_plugin.tracking.sinks.mlflow_internals import host_credentials
from platform_plugin.tracking.sinks.mlflow_rest import Transport, error_of

# The route's protocol, shared with the server's app (tracking/server/bulk_app.py)
ROUTE = "/platform/api/metrics/bulk"
VERSION = 1
MAX_POINTS = 100_000  # per request; the forwarder sends at most 10,000 per stream batch
JSON_HEADERS = {"Content-Type": "application/json"}
REQUEST_POINTS = 20_000  # per request (the route takes MAX_POINTS): a round is cut in several
IN_FLIGHT = 4  # requests of one round at once: the server's workers insert them in parallel


def _requests(groups: Any, limit: int) -> Iterator[Any]:
    """Cut (run_id, points) groups into requests of at most `limit` points, in order."""
    request: list = []
    size = 0
    for run_id, points in groups:
        for start in range(0, len(points), limit):
            part = points[start:start + limit]
            if size + len(part) > limit and request:
                yield request
                request, size = [], 0
            request.append((run_id, part))
            size += len(part)
    if request:
        yield request


class Requests(Protocol):
    """One request to the route: (status, body); a status not `allowed` raises MLflow's error
    (its code kept, so `is_permanent` judges it as a `log_batch` error, and the HTTP status as
    `status_code`, the name RestError uses: a proxy's 413 has no MLflow code to judge)."""

    def __call__(self, method: str, body: str | None, allowed: tuple[int, ...], **options: Any) -> tuple[int, bytes]: ...


@dataclasses.dataclass(frozen=True)
class RestRequests:
    """Through the sink's REST transport (mlflow_rest.py: MLflow not imported)."""
    transport: Transport

    def __call__(self, method: str, body: str | None, allowed: tuple[int, ...], **options: Any) -> tuple[int, bytes]:
        status, data = self.transport.request(
            method, ROUTE, body.encode() if body is not None else None, timeout=options["timeout"],
            retries=options.get("max_retries"), backoff=options.get("backoff_factor"),
            headers=JSON_HEADERS if body is not None else None)
        if status not in allowed:
            raise error_of(method, ROUTE, status, data)
        return status, data


@dataclasses.dataclass(frozen=True)
class MlflowRequests:
    """Through MLflow's own HTTP helper with its client's credentials (whatever auth plugin the
    user configured)."""
    client: Any  # mlflow.tracking.MlflowClient

    def __call__(self, method: str, body: str | None, allowed: tuple[int, ...], **options: Any) -> tuple[int, bytes]:
        from mlflow.utils.rest_utils import http_request, verify_rest_response
        response = http_request(host_credentials(self.client), ROUTE, method, data=body,
                                extra_headers=JSON_HEADERS if body is not None else None, **options)
        if response.status_code not in allowed:
            try:
                verify_rest_response(response, ROUTE)
            except Exception as exc:
                exc.status_code = response.status_code  # type: ignore[attr-defined]
                raise
        return response.status_code, response.content


class BulkRoute:
    """Per tracking URI: whether the server has the route (asked once), and the POST."""

    def __init__(self) -> None:
        self._found: dict[str, bool] = {}
        self._lock = threading.Lock()

    def available(self, requests: Requests, uri: str) -> bool:
        if urlparse(uri or "").scheme not in ("http", "https"):
            return False
        with self._lock:  # streams are forwarded by several threads: one probe
            if uri not in self._found:
                self._found[uri] = self._probe(requests, uri)
            return self._found[uri]

    def _probe(self, requests: Requests, uri: str) -> bool:
        """True: the route answers with our version. False: the server has no such route (a
        404/405: MLflow's own server). Anything else (down, auth refused) raises, so the
        forwarder retries later and nothing is decided from a transient failure."""
        status, data = requests("GET", None, (200, 404, 405), max_retries=2,
                                backoff_factor=0.5, timeout=30)
        if status in (404, 405):
            print(f"[platform_plugin] {uri} has no bulk metrics route ({ROUTE}: "
                  f"HTTP {status}, a plain `mlflow server`): metric points go "
                  "through MLflow's log_batch, 1,000 a request - slower. `platform-run server` "
                  "serves the route.", file=sys.stderr, flush=True)
            return False
        try:
            return int(json.loads(data).get("version", 0)) >= VERSION
        except (ValueError, AttributeError):
            return False

    def post(self, requests: Requests, uri: str, run_id: str, points: list[tuple[str, float, int, int]]) -> None:
        """points: (key, value, step, timestamp_ms). Stored all or nothing; a replay adds
        nothing. Errors are MLflow's (MlflowException with its error code)."""
        self.post_many(requests, uri, [(run_id, points)])

    def post_many(self, requests: Requests, uri: str, groups: list[tuple[str, list[tuple[str, float, int, int]]]]) -> None:
        """(run_id, points) of several runs (a forwarder round: one batch of every stream) in
        requests of REQUEST_POINTS, IN_FLIGHT at once (one transaction each; a resend after a
        failure part-way adds nothing, as every point is an exact repeat)."""
        parts = list(_requests(groups, REQUEST_POINTS))
        if len(parts) == 1:
            self._send(requests, uri, parts[0])
            return
        with ThreadPoolExecutor(min(IN_FLIGHT, len(parts)), thread_name_prefix="bulk") as pool:
            for done in [pool.submit(self._send, requests, uri, part) for part in parts]:
                done.result()  # the first failure is raised; the round is resent whole

    def _send(self, requests: Requests, uri: str, groups: Any) -> None:
        body = json.dumps({"runs": [{"run_id": run_id, "metrics": points} for run_id, points in groups]})
        try:
            requests("POST", body, (200,), timeout=120)
        except Exception as exc:
            if getattr(exc, "status_code", None) in (404, 405):
                with self._lock:  # the server was replaced by one without the route: ask again
                    self._found.pop(uri, None)  # before the next batch (and fall back to log_batch)
            raise
