"""The tracking server checked as soon as a job starts, from a thread of the launcher.

Refused credentials (HTTP 401), a server that does not answer, an experiment the user may not
log into (403) are said within seconds of the start, in the cell or the terminal, with what to
fix: otherwise they would show only when the job ends, hours later. Nothing waits for the
check: the ranks run, their points wait in the spool as always, and `platform-run sync`
delivers them once the setting is fixed. Two requests of MLflow's REST API with the stdlib
(mlflow_rest.py), no retry: the experiment by name, then, when it exists, the tag every job
of the plugin sets on it anyway (the permission logging needs: MLflow checks the same
"can update" for both).
"""
from __future__ import annotations

import threading
from typing import Callable, Mapping

from platform_plugin.tracking.sinks.mlflow_conventions import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
from platform_plugin.tracking.sinks.mlflow_refusals import access_refusal
from platform_plugin.tracking.sinks.mlflow_rest import RestClient, RestError, Transport

CHECK_TIMEOUT_S = 5.0  # a server that has not answered by then is said to be unreachable


def store_problem(uri: str, experiment_name: str, environ: Mapping[str, str]) -> str:
    """What stops the job's points from reaching the MLflow server `uri`, with what to fix;
    "" when the server let this user in (or answered with something the helper handles)."""
    transport = Transport(uri, environ)
    transport.retries, transport.timeout = 0, CHECK_TIMEOUT_S
    client = RestClient(uri, environ, transport)
    try:
        found = client.get_experiment_by_name(experiment_name)
        if found is not None:
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    except RestError as exc:
        if exc.status_code is None:  # no answer at all: refused, reset, timed out, no such host
            cause = exc.__cause__
            why = getattr(cause, "reason", None) or cause or exc
            return (f"the tracking server {uri} does not answer ({why}): start it "
                    "(`platform-run server`), or fix MLFLOW_TRACKING_URI in the project's .env")
        return access_refusal(exc, uri, environ) or ""
    return ""


def check_in_background(uri: str, experiment_name: str, environ: Mapping[str, str],
                        say: Callable[[str], None], spool_hint: str) -> threading.Thread:
    """`store_problem` in a daemon thread; `say(message)` when there is one. `spool_hint`:
    where the points wait and how they get delivered later."""
    def check() -> None:
        try:
            problem = store_problem(uri, experiment_name, environ)
        except Exception as exc:  # noqa: BLE001 - a check must never disturb the job
            problem = ""
            del exc
        if problem:
            say(f"tracking: {problem}. The job goes on; {spool_hint}")

    thread = threading.Thread(target=check, name="tracking-store-check", daemon=True)
    thread.start()
    return thread
