"""`platform-run server`: the team's MLflow tracking server - `mlflow server` on PostgreSQL,
several workers, artifacts served through it, behind MLflow's basic-auth app - and the `.env`
lines every server of a job needs. Runs until Ctrl-C/SIGTERM, then stops MLflow and PostgreSQL.
`platform-run server add-user NAME` gives a team member credentials of their own.

Both die with this command even when it is SIGKILLed: the launcher's lifeline watches it
(`Lifeline.for_groups`) and then sends SIGTERM to MLflow's process group and to the postmaster
alone (PostgreSQL puts each of its children in a session of its own), which PostgreSQL takes as
a clean "smart" shutdown once MLflow's connections are gone; SIGKILL only after the grace.
The short-lived children too (initdb, pg_ctl, the schema migration): each leads a session of
its own and is handed to the lifeline before it is waited for (util/children.py), and the
postmaster as soon as pg_ctl has written its pid."""
from __future__ import annotations

import argparse

import fcntl
import importlib.util
import ipaddress
import os
import signal
import socket
from pathlib import Path

from platform_plugin.cli import skip_the_last_collection
from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.processes.spawn import Lifeline
from platform_plugin.tracking.server import team_auth
from platform_plugin.tracking.server.local import (migrate_team_stores, start_team_server,
                                                   stop_server, wait_healthy)
from platform_plugin.tracking.server.postgres import (HOST as PG_HOST, LocalPostgres,
                                                      missing_reason, unreachable_parent)
from platform_plugin.util.folders import check_writable_folder
from platform_plugin.util.numbers import ANY_PORT, Bounds, number_argument
from platform_plugin.util.paths import checked_path, resolved
from platform_plugin.util.ports import check_free, free_port
from platform_plugin.util.stops import is_interruption, raise_interrupt

MAX_WORKERS = 64


def default_data_dir() -> Path:
    """Root's home is closed to the `postgres` user PostgreSQL must run as; /var/lib is not."""
    if os.geteuid() == 0:
        return Path("/var/lib/platform_plugin/server")
    return Path.home() / ".local" / "share" / "platform_plugin" / "server"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "server", help="run the team's MLflow tracking server on PostgreSQL",
        usage="platform-run server [-h] [--host HOST] [--port PORT] [--workers N] "
              "[--data-dir DIR]\n                           [--artifacts DIR] [--pg-port PORT] "
              "[--allowed-hosts HOSTS] [--no-auth]\n       platform-run server add-user NAME "
              "[--data-dir DIR]",
        description="mlflow server on a PostgreSQL database of its own, with artifacts served "
                    "through it; prints the MLFLOW_TRACKING_URI for every server's .env",
        epilog="add-user NAME: create a team member's user on the running server and print the "
               "lines of their .env (platform-run server add-user --help)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; the servers of a job need one "
                        "they reach, e.g. this machine's cluster address or 0.0.0.0)")
    p.add_argument("--port", type=number_argument("SERVER_PORT", "--port", int, bounds=ANY_PORT),
                   default=5000, metavar="PORT", help="MLflow port (default 5000; 0 = free)")
    p.add_argument("--workers", type=number_argument("SERVER_WORKERS", "--workers", int,
                                                     bounds=Bounds(1, MAX_WORKERS)),
                   default=4, metavar="N", help=f"MLflow web workers (default 4, at most "
                                                f"{MAX_WORKERS})")
    p.add_argument("--data-dir", type=checked_path("SERVER_DATA_DIR", "--data-dir"), metavar="DIR",
                   help=f"PostgreSQL cluster, password and log (default {default_data_dir()})")
    p.add_argument("--artifacts", type=checked_path("SERVER_ARTIFACTS_NOT_DIR", "--artifacts"),
                   metavar="DIR", help="where run artifacts are stored (default DATA_DIR/"
                                       "artifacts; a shared mount works too)")
    p.add_argument("--pg-port", type=number_argument("SERVER_PG_PORT", "--pg-port", int,
                                                     bounds=ANY_PORT), default=0, metavar="PORT",
                   help="PostgreSQL port on 127.0.0.1 (default: a free one)")
    p.add_argument("--allowed-hosts", metavar="HOSTS", help="Host headers MLflow accepts (its DNS-rebinding "
                   "guard; default: the printed address and localhost)")
    p.add_argument("--no-auth", action="store_true",
                   help="serve without authentication: anyone who reaches the port may read, "
                        "change and delete every run (default: MLflow's basic-auth, with an "
                        "admin generated on the first start)")
    p.set_defaults(func=run)
    # listed once, in the usage and the epilog (argparse's own listing named it twice)
    users = p.add_subparsers(dest="server_command", help=argparse.SUPPRESS)
    add = users.add_parser("add-user", prog="platform-run server add-user", help="create a team member's user on the running server "
                           "and print the lines of their .env",
                           description="Creates NAME with a generated password through the "
                           "running server (as its admin) and prints the .env lines once: "
                           "MLflow keeps only the password's hash.")
    add.add_argument("username", metavar="NAME")
    add.add_argument("--data-dir", type=checked_path("SERVER_DATA_DIR", "--data-dir"),
                     metavar="DIR", help=f"the server's data folder (default "
                                        f"{default_data_dir()})")
    add.set_defaults(func=run_add_user)


def _check_data_dir(data: Path) -> None:
    closed = unreachable_parent(data)
    if closed is not None:
        raise ConfigError([Problem(
            "SERVER_DATA_DIR", f"PostgreSQL runs as the `postgres` user, which cannot enter "
            f"{closed} (on the way to {data}): choose a --data-dir outside it (default "
            f"{default_data_dir()})", "--data-dir")])


def _check(args) -> None:
    problems = []
    if not 0 <= args.port <= 65535:
        problems.append(Problem("SERVER_PORT", f"--port {args.port}: a TCP port is 0-65535", "--port"))
    if not 0 <= args.pg_port <= 65535:  # PostgreSQL itself would refuse it after initdb
        problems.append(Problem("SERVER_PG_PORT", f"--pg-port {args.pg_port}: a TCP port is "
                                "0-65535 (0 = a free one)", "--pg-port"))
    if not 1 <= args.workers <= MAX_WORKERS:
        problems.append(Problem("SERVER_WORKERS", f"--workers must be 1..{MAX_WORKERS}", "--workers"))
    try:
        socket.getaddrinfo(args.host, None)
    except OSError:
        problems.append(Problem("SERVER_HOST", f"--host {args.host!r} is no address of this "
                                "machine", "--host"))
    if not args.no_auth and importlib.util.find_spec("flask_wtf") is None:
        problems.append(Problem("SERVER_AUTH_UNAVAILABLE", "MLflow's basic-auth app needs "
                                "Flask-WTF, which is not installed: pip install "
                                "\"platform_plugin[server]\" (or serve without authentication, "
                                "knowingly: --no-auth)", "--no-auth"))
    if problems:
        raise ConfigError(problems)
    why = missing_reason()
    if why:
        raise ConfigError([Problem("SERVER_POSTGRES", why, "postgres")])
    if args.port:
        check_free(args.port, args.host, what="--port")
    if args.pg_port:
        check_free(args.pg_port, PG_HOST, what="--pg-port")  # where the cluster will listen


def _check_folders(data: Path, artifacts: str) -> None:
    """Both folders can be made before initdb runs: a bad --data-dir or --artifacts is a
    refusal with a code, not a traceback after a cluster was half made."""
    folder = str(data)
    check_writable_folder(folder, "server data", "SERVER_DATA_DIR", "--data-dir")
    _check_data_dir(data)
    check_writable_folder(artifacts, "artifacts", "SERVER_ARTIFACTS", "--artifacts")


def _hold_data_dir(data: Path) -> int:
    """An exclusive flock on DATA/server.lock, or SERVER_DATA_DIR_BUSY: one PostgreSQL cluster
    serves one server: a second `platform-run server` on the same --data-dir would fail to start
    the cluster, and its clean-up would stop the first server's PostgreSQL. Returns the fd."""
    data.mkdir(parents=True, exist_ok=True)
    fd = os.open(data / "server.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError([Problem("SERVER_DATA_DIR_BUSY", f"another `platform-run server` (pid "
                                   f"{holder}) runs on {data}: one PostgreSQL cluster serves one "
                                   "server. Use that server's MLFLOW_TRACKING_URI, or pass another "
                                   "--data-dir", "--data-dir")]) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def tracking_uri(host: str, port: int) -> str:
    """The address the other servers use: the bind address, or this machine's name when
    listening on every interface."""
    if host in ("0.0.0.0", "::"):
        host = socket.getfqdn()
    elif ":" in host and not host.startswith("["):
        host = f"[{ipaddress.ip_address(host)}]"
    return f"http://{host}:{port}"


def allowed_hosts(explicit: str | None, uri: str, port: int) -> str | None:
    """MLflow accepts only localhost Host headers unless told otherwise: the address the other
    servers use must be allowed too."""
    if explicit:
        return explicit
    host = uri.split("//", 1)[1].rsplit(":", 1)[0]
    if host in ("127.0.0.1", "localhost"):
        return None
    return ",".join([host, f"{host}:{port}", "localhost", f"localhost:{port}", "127.0.0.1",
                     f"127.0.0.1:{port}"])


# smart shutdown waits for MLflow's connections to close and writes a checkpoint
LIFELINE_GRACE_S = 30.0
ADDRESS_FILE = "address"  # `add-user` finds the running server there: its loopback URL, its URI


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def step(text: str) -> None:
    print(text, flush=True)


def run(args) -> int:
    _check(args)
    data = resolved(args.data_dir or default_data_dir(), "server data folder", "SERVER_DATA_DIR",
                    "--data-dir")
    artifacts = str(resolved(args.artifacts, "artifacts folder", "SERVER_ARTIFACTS_NOT_DIR",
                             "--artifacts") if args.artifacts else data / "artifacts")
    _check_folders(data, artifacts)
    holder = _hold_data_dir(data)  # for this process's life (closed on exec: not the children's)
    os.makedirs(artifacts, exist_ok=True)
    signal.signal(signal.SIGTERM, raise_interrupt)
    skip_the_last_collection()  # after Ctrl-C: exit once the server has stopped
    lifeline = Lifeline.for_groups(LIFELINE_GRACE_S)  # first: no child without it
    # every child (initdb, pg_ctl, the postmaster, the migration, MLflow) is handed to it
    # before it is waited for: SIGKILLed at any step, this command leaves none behind
    pg = LocalPostgres(data, args.pg_port or free_port(), started=lifeline.add)
    port = args.port or free_port(args.host if args.host not in ("0.0.0.0", "::") else "0.0.0.0")
    proc = None
    address = data / ADDRESS_FILE
    try:
        if not pg.initialised:
            step(f"initialising PostgreSQL in {pg.pgdata} (first start)...")
            pg.init()
        step(f"starting PostgreSQL on {PG_HOST}:{pg.port}...")
        pg.start()
        auth_env, credentials, created = None, None, False
        if not args.no_auth:
            credentials, created = team_auth.load_or_create(data)
            pg.create_database(team_auth.AUTH_DATABASE)
            auth_env = team_auth.server_env(data, credentials,
                                            pg.database_uri(team_auth.AUTH_DATABASE))
        log = data / "mlflow-server.log"
        step("migrating MLflow's schema" + ("" if args.no_auth else " and its users' database")
             + "...")
        migrate_team_stores(pg.uri, folder=data, auth_env=auth_env, started=lifeline.add)
        uri = tracking_uri(args.host, port)
        step(f"starting MLflow ({args.workers} worker(s)) on {args.host}:{port}...")
        proc = start_team_server(pg.uri, args.host, port, workers=args.workers, artifacts=artifacts,
                                 folder=data, allowed_hosts=allowed_hosts(args.allowed_hosts, uri, port),
                                 auth_env=auth_env)
        lifeline.add(proc.pid)  # its own session: the group is MLflow and its workers
        local = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{port}"
        wait_healthy(local, proc, log_path=log, timeout=180)
        address.write_text(f"{local}\n{uri}\n")
        print(f"ready: MLflow tracking server at {uri}  (PostgreSQL in {pg.pgdata}, artifacts in "
              f"{artifacts}, {args.workers} workers; log {log}; Ctrl-C stops it)")
        _print_env_lines(args, data, uri, credentials, created)
        proc.wait()
    except BaseException as exc:  # Ctrl-C, SIGTERM: the servers stop below and that is a success
        if not is_interruption(exc):
            raise
    finally:
        ended = None if proc is None else proc.poll()  # None: it served until stopped here
        if proc is not None:
            stop_server(proc)
        pg.stop()
        lifeline.release()
        address.unlink(missing_ok=True)
    return 0 if ended in (0, -15, None) else 1


def _print_env_lines(args, data: Path, uri: str, credentials: team_auth.TeamCredentials | None,
                     created: bool) -> None:
    """The admin's password is printed once, when it is generated: whoever set the server up
    is at the terminal then. Later starts may run unattended with their output in a log, so
    they name the 0600 file that holds it instead."""
    if credentials is None:
        if not is_loopback(args.host):
            print(f"WARNING: --no-auth on {args.host}: anyone who reaches {uri} can read, change "
                  "and delete every run")
        print("Put this line in the .env of every server of a job (and of this one):")
        print(*team_auth.env_lines(uri), flush=True)
        return
    where = data / team_auth.CREDENTIALS_FILE
    print(f"Authentication: MLflow's basic-auth (admin credentials in {where}, mode 600). "
          f"A user per team member: platform-run server add-user NAME --data-dir {data}")
    print("Put these lines in the .env of every server of a job (and of this one):")
    if created:
        lines = team_auth.env_lines(uri, credentials.admin_username, credentials.admin_password)
    else:
        lines = team_auth.env_lines(uri, credentials.admin_username, f"<admin_password in "
                                    f"{where}: printed at the first start only>")
    print("\n".join(lines), flush=True)


def run_add_user(args) -> int:
    data = resolved(args.data_dir or default_data_dir(), "server data folder", "SERVER_DATA_DIR",
                    "--data-dir")
    credentials = team_auth.load(data)
    try:
        local, uri = (data / ADDRESS_FILE).read_text().split()
    except (OSError, ValueError):
        raise ConfigError([Problem("SERVER_NOT_RUNNING", f"no `platform-run server` is serving "
                                   f"from {data}: start it first (users live in its database)",
                                   "--data-dir")]) from None
    password = team_auth.add_user(local, credentials, args.username)
    print(f"User {args.username!r} created. Their .env lines (the password is shown only now):")
    print("\n".join(team_auth.env_lines(uri, args.username, password)), flush=True)
    return 0
