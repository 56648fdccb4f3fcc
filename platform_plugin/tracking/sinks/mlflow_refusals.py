"""What a failed request to the tracking store means, from either client's error (MLflow's,
or mlflow_rest.py's): records the store refuses for good (`permanent`: set aside, never
retried), a refusal of the whole run (`refused_run`), or of the credentials (`access_refusal`:
a setting to fix, the records wait). Anything else may pass on a later try."""
from __future__ import annotations

import os
import re
import sys
from typing import Mapping

from platform_plugin.tracking.sinks.mlflow_rest import credentials, store_errors

# MLflow's client keeps the HTTP status of an error that is not MLflow's JSON (a proxy's 413 page)
# only in its message (mlflow.utils.rest_utils.verify_rest_response); its error code says
# INTERNAL_ERROR whatever the status was.
MLFLOW_STATUS = re.compile(r"failed with error code (\d{3}) != \d{3}")


def http_status(exc: BaseException) -> int | None:
    """The HTTP status a failed request was answered with, from either client's error (None: no
    answer, e.g. a dropped connection)."""
    status = (getattr(getattr(exc, "response", None), "status_code", None)
              or getattr(exc, "status_code", None))
    if status is None and isinstance(exc, store_errors()):
        found = MLFLOW_STATUS.search(str(exc))
        status = int(found.group(1)) if found else None
    return status


PERMANENT_CODES = ("INVALID_PARAMETER_VALUE", "BAD_REQUEST", "RESOURCE_DOES_NOT_EXIST")
# the DBAPI modules whose DataError means "this value never fits" (out of range, too long)
DATA_ERROR_MODULES = ("sqlalchemy.exc", "psycopg2", "sqlite3")


def permanent(exc: BaseException) -> bool:
    """The store will refuse these records whatever the retry: MLflow's refusal of a value or
    a run (HTTP 400 INVALID_PARAMETER_VALUE, RESOURCE_DOES_NOT_EXIST), a request too large for
    the server (413), a number the database cannot hold (sqlite's OverflowError, a DataError
    of the driver or SQLAlchemy), an artifact file gone. Anything else (a refused connection,
    a 5xx, a locked database, a timeout) may pass: the batch waits for the next pass."""
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, OverflowError)):
        return True
    loaded = (sys.modules.get(name) for name in DATA_ERROR_MODULES)  # none raised before its import
    if isinstance(exc, tuple(m.DataError for m in loaded if m is not None and hasattr(m, "DataError"))):
        return True
    if http_status(exc) == 413:
        return True
    return isinstance(exc, store_errors()) and getattr(exc, "error_code", None) in PERMANENT_CODES


def refused_run(exc: BaseException) -> bool:
    """The refusal is the run's (unknown, deleted): every record of its batch shares it."""
    code = getattr(exc, "error_code", None) if isinstance(exc, store_errors()) else None
    return code == "RESOURCE_DOES_NOT_EXIST" or (
        code == "INVALID_PARAMETER_VALUE" and "must be in the 'active' state" in str(exc))


# MLflow's codes for a request its auth app turned away (mlflow.exceptions: 401, 403)
ACCESS_CODES = {"UNAUTHENTICATED": 401, "CUSTOMER_UNAUTHORIZED": 401, "PERMISSION_DENIED": 403}


def access_refusal(exc: BaseException, uri: str, environ: Mapping[str, str] | None = None) -> str | None:
    """What to do when the server turned the request away for its credentials (HTTP 401) or its
    user's permission (403), else None. Not a refusal of the records: they wait in the spool
    until the credentials are fixed, and retrying before that only repeats the refusal."""
    code = getattr(exc, "error_code", None) if isinstance(exc, store_errors()) else None
    status = ACCESS_CODES.get(str(code)) or http_status(exc)
    if status not in (401, 403):
        return None
    env = os.environ if environ is None else environ
    user, password = credentials(env)
    where = ("in the project's .env (beside CODE/, or the working folder's: the lines `platform-run "
             "server` printed for the admin, `platform-run server add-user NAME` for a team "
             "member's own) or in the environment")
    if status == 403:
        return (f"the tracking server {uri} refused user {user!r} (HTTP 403 PERMISSION_DENIED): "
                "logging into an experiment another user created takes an EDIT grant from its "
                "creator or the server's admin; or set MLFLOW_EXPERIMENT_NAME to an experiment "
                "of your own")
    if not (user and password) and not env.get("MLFLOW_TRACKING_TOKEN"):
        return (f"the tracking server {uri} requires credentials (HTTP 401) and "
                f"MLFLOW_TRACKING_{'PASSWORD' if user else 'USERNAME'} is not set: set "
                f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD {where}")
    return (f"the tracking server {uri} refused the credentials of user {user!r} (HTTP 401: no "
            "such user, or a wrong password): fix MLFLOW_TRACKING_USERNAME and "
            f"MLFLOW_TRACKING_PASSWORD {where}")
