"""The few MLflow tracking calls the forwarding helper makes, as plain REST requests (stdlib only).

Into `platform-run server` (an http store with the bulk route, mlflow_bulk.py) the helper needs
little of MLflow: the experiment, the runs, their tags and params, the runs' end. Importing
MLflow's client for that costs seconds of CPU (docs/benchmarks.md, multiserver) while the ranks'
points wait, so these calls go through MLflow's documented REST API 2.0 (`/api/2.0/mlflow/...`,
the requests MLflow's own `RestStore` sends) with urllib. Everything else a client may need
(artifact upload, run search: multi-server jobs, end of job) goes through MLflow's own client,
made on first use (`RestClient.full()`).

Same settings as MLflow's client: MLFLOW_TRACKING_USERNAME/PASSWORD (or ~/.mlflow/credentials)
as basic auth, else MLFLOW_TRACKING_TOKEN as bearer; MLFLOW_TRACKING_INSECURE_TLS,
MLFLOW_TRACKING_SERVER_CERT_PATH; MLFLOW_HTTP_REQUEST_TIMEOUT/MAX_RETRIES/BACKOFF_FACTOR (retry
on a lost connection and on 408/429/5xx). Settings this module does not implement (an auth
plugin, AWS SigV4, a client certificate, a workspace, request-header plugins) make `usable()`
False: the sink then uses MLflow's client for everything.
"""
from __future__ import annotations

import base64
import configparser
import dataclasses
import json
import mimetypes
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from functools import lru_cache
from importlib.metadata import entry_points
from types import SimpleNamespace
from urllib.parse import quote, urlparse
from typing import Any, Mapping

API = "/api/2.0/mlflow/"
ARTIFACTS_API = "/api/2.0/mlflow-artifacts/artifacts/"  # a server's proxied artifact store
PUT_LIMIT = 100 * 2 ** 20  # larger files go through MLflow's client (its multipart upload)
TEXT_SUFFIXES = (".txt", ".log", ".json", ".yaml", ".yml", ".py", ".md", ".csv")  # as MLflow's
RETRY_CODES = (408, 429, 500, 502, 503, 504)  # MLflow's transient failure codes
HISTORY_PAGE = 25000  # points per metrics/get-history request (MLflow's largest page)
UNSUPPORTED_ENV = ("MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_AWS_SIGV4",
                   "MLFLOW_TRACKING_CLIENT_CERT_PATH", "MLFLOW_WORKSPACE")


@dataclasses.dataclass(frozen=True)
class KeyValue:
    """A param or a tag, as MLflow's Param/RunTag."""
    key: str
    value: str


class RestError(Exception):
    """An MLflow REST error: `error_code` as MLflow names it (RESOURCE_DOES_NOT_EXIST, ...)."""

    def __init__(self, message: str, error_code: str = "INTERNAL_ERROR", status_code: int | None = None):
        super().__init__(message)
        self.error_code = error_code
        self.status_code = status_code


HTTP_CODES = {400: "BAD_REQUEST", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
              404: "ENDPOINT_NOT_FOUND", 429: "REQUEST_LIMIT_EXCEEDED", 503: "TEMPORARILY_UNAVAILABLE"}


def error_of(method: str, path: str, status: int, data: bytes) -> RestError:
    """The error an answer other than 200 means, with MLflow's error code: the one in the body,
    else the one MLflow's client derives from the HTTP status."""
    try:
        code = json.loads(data).get("error_code")
    except (ValueError, AttributeError):
        code = None
    return RestError(f"{method} {path} failed with HTTP {status}: "
                     f"{data[:500].decode(errors='replace')}",
                     str(code or HTTP_CODES.get(status, "INTERNAL_ERROR")), status)


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


def usable(uri: str, environ: Mapping[str, str] | None = None) -> bool:
    """An http(s) store whose client settings this module implements."""
    env = os.environ if environ is None else environ
    if urlparse(uri or "").scheme not in ("http", "https"):
        return False
    if any(env.get(name) and (name != "MLFLOW_TRACKING_AWS_SIGV4" or _flag(env.get(name)))
           for name in UNSUPPORTED_ENV):
        return False
    return not _header_plugins()


@lru_cache(maxsize=1)
def _header_plugins() -> bool:
    """MLflow adds request headers from `mlflow.request_header_provider` plugins."""
    try:
        return bool(entry_points(group="mlflow.request_header_provider"))
    except TypeError:  # Python 3.9: entry_points() takes no group
        return bool(entry_points().get("mlflow.request_header_provider", ()))


def credentials(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    user, password = env.get("MLFLOW_TRACKING_USERNAME"), env.get("MLFLOW_TRACKING_PASSWORD")
    path = os.path.expanduser("~/.mlflow/credentials")
    if (not user or not password) and os.path.exists(path):
        config = configparser.ConfigParser()
        config.read(path)
        if "mlflow" in config:
            user = user or config["mlflow"].get("mlflow_tracking_username")
            password = password or config["mlflow"].get("mlflow_tracking_password")
    return user, password


class Transport:
    """Requests to one tracking server with MLflow's client settings."""

    def __init__(self, uri: str, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.base = uri.rstrip("/")
        self.headers = {"User-Agent": "platform-plugin (mlflow REST)"}
        user, password = credentials(env)
        if user and password:
            token = base64.standard_b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = "Basic " + token
        elif env.get("MLFLOW_TRACKING_TOKEN"):
            self.headers["Authorization"] = "Bearer " + env["MLFLOW_TRACKING_TOKEN"]
        self.timeout = float(env.get("MLFLOW_HTTP_REQUEST_TIMEOUT") or 120)
        self.retries = int(env.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES") or 7)
        self.backoff = float(env.get("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR") or 2)
        self.context = None
        if self.base.startswith("https:"):
            if _flag(env.get("MLFLOW_TRACKING_INSECURE_TLS")):
                self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # as requests' verify=False
                self.context.check_hostname = False
                self.context.verify_mode = ssl.CERT_NONE
            else:
                self.context = ssl.create_default_context(cafile=env.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)

    def request(self, method: str, path: str, body: bytes | None = None, *, timeout: float | None = None,
                retries: int | None = None, backoff: float | None = None,
                headers: dict | None = None) -> tuple[int, bytes]:
        """(status, body). Retries a lost connection and MLflow's transient codes; raises
        RestError when the server cannot be reached at all."""
        retries = self.retries if retries is None else retries
        backoff = self.backoff if backoff is None else backoff
        for attempt in range(retries + 1):
            request = urllib.request.Request(self.base + path, data=body, method=method,
                                             headers={**self.headers, **(headers or {})})
            try:
                with urllib.request.urlopen(request, timeout=timeout or self.timeout,
                                            context=self.context) as response:
                    status, data = response.status, response.read()
            except urllib.error.HTTPError as exc:
                status, data = exc.code, exc.read()
            except OSError as exc:  # refused, reset, timed out
                if attempt >= retries:
                    raise RestError(f"API request to {self.base + path} failed: {exc}") from exc
                time.sleep(min(backoff * 2 ** attempt, 120))
                continue
            if status not in RETRY_CODES or attempt >= retries:
                return status, data
            time.sleep(min(backoff * 2 ** attempt, 120))
        raise AssertionError("unreachable")

    def call(self, method: str, endpoint: str, payload: dict | None = None, query: str = "") -> dict:
        """One MLflow API call: the decoded answer, or RestError with MLflow's error code."""
        body = json.dumps(payload).encode() if payload is not None else None
        status, data = self.request(method, API + endpoint + query, body,
                                    headers={"Content-Type": "application/json"} if body else None)
        if status != 200:
            raise error_of(method, API + endpoint, status, data)
        try:
            return json.loads(data or b"{}")
        except ValueError as exc:
            raise RestError(f"{API + endpoint}: the answer is not JSON") from exc

    def healthy(self, timeout: float = 2) -> str | None:
        """None, or why the server does not answer (one try: a quick probe)."""
        try:
            status, _ = self.request("GET", "/health", timeout=timeout, retries=0)
        except RestError as exc:
            return f"MLflow server {self.base} unreachable ({exc.__cause__.__class__.__name__})"
        return None if status == 200 else f"MLflow server {self.base} answered HTTP {status}"


def _run(answer: dict) -> SimpleNamespace:
    run = answer.get("run", {})
    info = run.get("info", {})
    tags = {t["key"]: t.get("value", "") for t in run.get("data", {}).get("tags", [])}
    metrics = {m["key"]: float(m.get("value", 0)) for m in run.get("data", {}).get("metrics", [])}
    return SimpleNamespace(info=SimpleNamespace(run_id=info.get("run_id"), status=info.get("status"),
                                                artifact_uri=info.get("artifact_uri"),
                                                start_time=int(info.get("start_time") or 0)),
                           data=SimpleNamespace(tags=tags, metrics=metrics))  # metrics: latest values


def _mime_type(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def _pairs(items: Any) -> list[dict]:
    return [{"key": item.key, "value": str(item.value)} for item in items]


class RestClient:
    """The part of `mlflow.tracking.MlflowClient` the sink uses, same names and arguments."""

    def __init__(self, uri: str, environ: Mapping[str, str] | None = None, transport: Transport | None = None) -> None:
        self.uri = uri
        self.transport = transport or Transport(uri, environ)  # the sink's, also its health probe
        self._full: Any = None
        self._artifact_uris: dict[str, str] = {}  # run id -> its artifact URI

    def full(self) -> Any:
        """MLflow's own client, for what this one does not do (imports MLflow: seconds)."""
        if self._full is None:
            from mlflow.tracking import MlflowClient
            self._full = MlflowClient(tracking_uri=self.uri)
        return self._full

    def get_experiment_by_name(self, name: str) -> Any:
        try:
            found = self.transport.call("GET", "experiments/get-by-name",
                                        query="?experiment_name=" + quote(name, safe=""))
        except RestError as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise
        return SimpleNamespace(**found["experiment"])

    def create_experiment(self, name: str, artifact_location: str | None = None) -> str:
        payload = {"name": name, **({"artifact_location": artifact_location} if artifact_location else {})}
        return str(self.transport.call("POST", "experiments/create", payload)["experiment_id"])

    def set_experiment_tag(self, experiment_id: str, key: str, value: Any) -> None:
        self.transport.call("POST", "experiments/set-experiment-tag",
                            {"experiment_id": str(experiment_id), "key": key, "value": str(value)})

    def create_run(self, experiment_id: str, start_time: int | None = None, tags: dict | None = None,
                   run_name: str | None = None) -> Any:
        tags = tags or {}
        payload = {"experiment_id": str(experiment_id), "user_id": tags.get("mlflow.user", "unknown"),
                   "start_time": start_time or int(time.time() * 1000),
                   "tags": [{"key": k, "value": str(v)} for k, v in tags.items()]}
        if run_name is not None:
            payload["run_name"] = run_name
        run = _run(self.transport.call("POST", "runs/create", payload))
        self._artifact_uris[run.info.run_id] = run.info.artifact_uri
        return run

    def log_batch(self, run_id: str, metrics: Any = (), params: Any = (), tags: Any = (), synchronous: Any | None = None) -> None:
        if metrics:  # MLflow's JSON for NaN/inf and its metric rules: only when the route is gone
            self.full().log_batch(run_id, metrics=list(metrics), params=list(params), tags=list(tags))
            return
        self.transport.call("POST", "runs/log-batch",
                            {"run_id": run_id, "params": _pairs(params), "tags": _pairs(tags)})

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        self.transport.call("POST", "runs/set-tag", {"run_id": run_id, "key": key, "value": str(value)})

    def delete_tag(self, run_id: str, key: str) -> None:
        self.transport.call("POST", "runs/delete-tag", {"run_id": run_id, "key": key})

    def get_run(self, run_id: str) -> Any:
        return _run(self.transport.call("GET", "runs/get", query="?run_id=" + quote(run_id, safe="")))

    def set_terminated(self, run_id: str, status: str | None = None, end_time: int | None = None) -> None:
        self.transport.call("POST", "runs/update", {"run_id": run_id, "status": status or "FINISHED",
                                                    "end_time": end_time or int(time.time() * 1000)})

    def update_run(self, run_id: str, status: str) -> None:
        self.transport.call("POST", "runs/update", {"run_id": run_id, "status": status})

    def delete_run(self, run_id: str) -> None:
        self.transport.call("POST", "runs/delete", {"run_id": run_id})

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None = None) -> None:
        """Into the server's proxied artifact store (a run's `mlflow-artifacts:/...` URI: `mlflow
        server --serve-artifacts`, as `platform-run server` runs it) one PUT, the request MLflow's
        client sends; any other artifact store, a large file or an odd path: MLflow's client."""
        if run_id not in self._artifact_uris:
            self._artifact_uris[run_id] = self.get_run(run_id).info.artifact_uri or ""
        where = urlparse(self._artifact_uris[run_id])
        odd = artifact_path and (artifact_path.startswith("/") or ".." in artifact_path.split("/"))
        if where.scheme != "mlflow-artifacts" or where.netloc or odd or os.path.getsize(local_path) > PUT_LIMIT:
            self.full().log_artifact(run_id, local_path, artifact_path)
            return
        name = os.path.basename(local_path)
        parts = [where.path.strip("/"), (artifact_path or "").strip("/"), name]
        path = ARTIFACTS_API + quote("/".join(p for p in parts if p))
        with open(local_path, "rb") as f:
            data = f.read()
        kind = "text/plain" if name.lower().endswith(TEXT_SUFFIXES) else _mime_type(name)
        status, answer = self.transport.request("PUT", path, data, headers={"Content-Type": kind})
        if status != 200:
            raise error_of("PUT", path, status, answer)

    def get_metric_history(self, run_id: str, key: str) -> list:
        """Every point of `key` (step, value, timestamp), page after page as MLflow's client
        reads them; NaN and the infinities come as strings ("NaN"), which float() reads."""
        points: list = []
        token = ""
        while True:
            query = (f"?run_id={quote(run_id, safe='')}&metric_key={quote(key, safe='')}"
                     f"&max_results={HISTORY_PAGE}" + (f"&page_token={quote(token, safe='')}" if token else ""))
            answer = self.transport.call("GET", "metrics/get-history", query=query)
            points += [SimpleNamespace(step=int(m.get("step") or 0), value=float(m.get("value", 0)),
                                       timestamp=int(m.get("timestamp") or 0))
                       for m in answer.get("metrics", [])]
            token = answer.get("next_page_token") or ""
            if not token:
                return points

    def search_runs(self, experiment_ids: Any, filter_string: str = "", max_results: int = 1000, **more: Any) -> Any:
        """Active runs, one page, as MLflow's client returns them by default (the parent of a
        job across servers: sinks/mlflow_job.py); another view, order or page: MLflow's client."""
        if more:
            return self.full().search_runs(experiment_ids, filter_string, max_results=max_results, **more)
        answer = self.transport.call("POST", "runs/search", {
            "experiment_ids": [str(e) for e in experiment_ids], "filter": filter_string,
            "run_view_type": "ACTIVE_ONLY", "max_results": max_results})
        return [_run({"run": run}) for run in answer.get("runs", [])]


def store_errors() -> tuple[type[BaseException], ...]:
    """The exceptions carrying MLflow's error codes a store's call may raise: this module's, and
    MLflow's own once it is imported (before, none of them can exist)."""
    mlflow_errors = sys.modules.get("mlflow.exceptions")
    return (RestError,) if mlflow_errors is None else (RestError, mlflow_errors.MlflowException)
