"""Who may use the team server: MLflow's own basic-auth app and permission model.

`platform-run server` keeps, beside the PostgreSQL password and like it mode 0600:
- `mlflow-auth.json`: the admin's name and generated password, and the Flask secret key the
  auth app's CSRF protection needs (the same in every worker);
- `basic_auth.ini`: MLflow's auth configuration (`MLFLOW_AUTH_CONFIG_PATH`). Its users,
  password hashes and permissions live in a database `mlflow_auth` of the same PostgreSQL
  cluster, whose URI (with the cluster's password) only this file holds.
The admin's credentials reach MLflow in its environment (MLFLOW_AUTH_ADMIN_USERNAME/PASSWORD:
MLflow creates the admin from them on an empty user store), never on a command line.

MLflow's default permission model, unchanged: every user may read every experiment
(`default_permission = READ`) and manages the experiments they create; logging into someone
else's experiment takes an EDIT grant from its manager or the admin. (A grant only adds to the
default: a default of EDIT could not be narrowed for one experiment.)

MLflow checks the password of every request against its hash (werkzeug's scrypt: tens to
hundreds of ms of a worker's CPU), at least twice a request: the auth app's gate, then its
admin check, then the permission check of a user who is not the admin, and the bulk route's. `auth_cache_ttl_seconds` makes each worker remember a credential it accepted
for that long. Only the yes/no of the password is remembered: permissions and the admin flag
are read from the database on every request, so a grant or a revocation counts at once; a
password changed or a user deleted through another worker is still accepted by this one until
its entry expires (at most AUTH_CACHE_TTL_S).
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import secrets
import urllib.error
import urllib.request
from pathlib import Path

from platform_plugin.errors import ConfigError, PlatformPluginError, Problem

ADMIN_USERNAME = "admin"
CREDENTIALS_FILE = "mlflow-auth.json"
CONFIG_FILE = "basic_auth.ini"
AUTH_DATABASE = "mlflow_auth"
DEFAULT_PERMISSION = "READ"
AUTH_CACHE_TTL_S = 30  # how long a worker remembers an accepted password (see above)
# MLflow's REST route that creates a user (mlflow/server/auth/routes.py: CREATE_USER)
CREATE_USER = "/api/2.0/mlflow/users/create"


@dataclasses.dataclass(frozen=True)
class TeamCredentials:
    admin_username: str
    admin_password: str
    secret_key: str


def write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable by its owner only from the first byte on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)


def load_or_create(data: Path) -> tuple[TeamCredentials, bool]:
    """The server's credentials, generated on its first start; (credentials, created now)."""
    path = data / CREDENTIALS_FILE
    if path.exists():
        return TeamCredentials(**json.loads(path.read_text())), False
    credentials = TeamCredentials(ADMIN_USERNAME, secrets.token_urlsafe(24),
                                  secrets.token_urlsafe(32))
    write_private(path, json.dumps(dataclasses.asdict(credentials)))
    return credentials, True


def load(data: Path) -> TeamCredentials:
    """The credentials of the server on `data`, or SERVER_NO_AUTH when it has none."""
    path = data / CREDENTIALS_FILE
    if not path.exists():
        raise ConfigError([Problem("SERVER_NO_AUTH", f"no team server credentials in {data} "
                                   "(no `platform-run server` with authentication ran there): "
                                   "pass the server's --data-dir", "--data-dir")])
    return TeamCredentials(**json.loads(path.read_text()))


def server_env(data: Path, credentials: TeamCredentials, database_uri: str,
               cache_ttl_s: int = AUTH_CACHE_TTL_S) -> dict[str, str]:
    """The auth app's settings for `mlflow server`'s environment; writes `basic_auth.ini`.
    `cache_ttl_s` 0: every request's password checked against its hash (the benchmark's B)."""
    config = data / CONFIG_FILE
    write_private(config, "[mlflow]\n"
                          f"default_permission = {DEFAULT_PERMISSION}\n"
                          f"database_uri = {database_uri}\n"
                          f"admin_username = {credentials.admin_username}\n"
                          f"auth_cache_ttl_seconds = {cache_ttl_s}\n"
                          "authorization_function = "
                          "mlflow.server.auth:authenticate_request_basic_auth\n")
    return {"MLFLOW_AUTH_CONFIG_PATH": str(config),
            "MLFLOW_AUTH_ADMIN_USERNAME": credentials.admin_username,
            "MLFLOW_AUTH_ADMIN_PASSWORD": credentials.admin_password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": credentials.secret_key}


def env_lines(uri: str, username: str | None = None, password: str | None = None) -> list[str]:
    """The lines of a `.env` for a server of a job (MLflow's own variables)."""
    lines = [f"MLFLOW_TRACKING_URI={uri}"]
    if username is not None:
        lines.append(f"MLFLOW_TRACKING_USERNAME={username}")
    if password is not None:
        lines.append(f"MLFLOW_TRACKING_PASSWORD={password}")
    return lines


def basic_auth(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def add_user(url: str, credentials: TeamCredentials, username: str) -> str:
    """Create `username` with a generated password through MLflow's REST API as the admin;
    returns the password (MLflow keeps only its hash)."""
    password = secrets.token_urlsafe(18)
    request = urllib.request.Request(
        url.rstrip("/") + CREATE_USER, method="POST",
        data=json.dumps({"username": username, "password": password}).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": basic_auth(credentials.admin_username,
                                             credentials.admin_password)})
    try:
        with urllib.request.urlopen(request, timeout=30):
            return password
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode(errors="replace")
        try:
            detail = json.loads(detail).get("message", detail)
        except ValueError:
            pass
        raise PlatformPluginError(f"the team server at {url} did not create user {username!r}: "
                                  f"HTTP {exc.code}: {detail}") from None
    except OSError as exc:
        raise PlatformPluginError(f"the team server at {url} is not reachable ({exc}): is "
                                  "`platform-run server` running on this --data-dir?") from None
