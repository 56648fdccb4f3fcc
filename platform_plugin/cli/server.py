"""`platform-run server`: the team's MLflow tracking server - `mlflow server` on PostgreSQL,
several workers, artifacts served through it - and the MLFLOW_TRACKING_URI every server of a
job puts in its `.env`. Runs until Ctrl-C/SIGTERM, then stops MLflow and PostgreSQL.

Both die with this command even when it is SIGKILLed: the launcher's lifeline watches it
(`Lifeline.for_groups`) and then sends SIGTERM to MLflow's process group and to the postmaster
alone (PostgreSQL puts each of its children in a session of its own), which PostgreSQL takes as
a clean "smart" shutdown once MLflow's connections are gone; SIGKILL only after the grace."""
from __future__ import annotations

import fcntl
import ipaddress
import os
import signal
import socket
from pathlib import Path

from platform_plugin.cli import interrupt, skip_the_last_collection
from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.processes.spawn import Lifeline
from platform_plugin.tracking.server.local import start_team_server, stop_server, wait_healthy
from platform_plugin.tracking.server.postgres import (HOST as PG_HOST, LocalPostgres,
                                                      missing_reason, unreachable_parent)
from platform_plugin.util.folders import check_writable_folder
from platform_plugin.util.paths import resolved
from platform_plugin.util.ports import check_free, free_port


def default_data_dir() -> Path:
    """Root's home is closed to the `postgres` user PostgreSQL must run as; /var/lib is not."""
    if os.geteuid() == 0:
        return Path("/var/lib/platform_plugin/server")
    return Path.home() / ".local" / "share" / "platform_plugin" / "server"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "server", help="run the team's MLflow tracking server on PostgreSQL",
        description="mlflow server on a PostgreSQL database of its own, with artifacts served "
                    "through it; prints the MLFLOW_TRACKING_URI for every server's .env")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; the servers of a job need one "
                        "they reach, e.g. this machine's cluster address or 0.0.0.0)")
    p.add_argument("--port", type=int, default=5000, help="MLflow port (default 5000; 0 = free)")
    p.add_argument("--workers", type=int, default=4, help="MLflow web workers (default 4)")
    p.add_argument("--data-dir", help=f"PostgreSQL cluster, password and log (default "
                                      f"{default_data_dir()})")
    p.add_argument("--artifacts", help="where run artifacts are stored (default DATA_DIR/"
                                       "artifacts; a shared mount works too)")
    p.add_argument("--pg-port", type=int, default=0,
                   help="PostgreSQL port on 127.0.0.1 (default: a free one)")
    p.add_argument("--allowed-hosts", help="Host headers MLflow accepts (its DNS-rebinding "
                   "guard; default: the printed address and localhost)")
    p.set_defaults(func=run)


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
    if not 1 <= args.workers <= 64:
        problems.append(Problem("SERVER_WORKERS", "--workers must be 1..64", "--workers"))
    try:
        socket.getaddrinfo(args.host, None)
    except OSError:
        problems.append(Problem("SERVER_HOST", f"--host {args.host!r} is no address of this "
                                "machine", "--host"))
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


def run(args) -> int:
    _check(args)
    data = resolved(args.data_dir or default_data_dir(), "server data folder", "SERVER_DATA_DIR",
                    "--data-dir")
    artifacts = str(resolved(args.artifacts, "artifacts folder", "SERVER_ARTIFACTS_NOT_DIR",
                             "--artifacts") if args.artifacts else data / "artifacts")
    _check_folders(data, artifacts)
    holder = _hold_data_dir(data)  # for this process's life (closed on exec: not the children's)
    os.makedirs(artifacts, exist_ok=True)
    signal.signal(signal.SIGTERM, interrupt)
    skip_the_last_collection()  # after Ctrl-C: exit once the server has stopped
    pg = LocalPostgres(data, args.pg_port or free_port())
    port = args.port or free_port(args.host if args.host not in ("0.0.0.0", "::") else "0.0.0.0")
    proc = None
    lifeline = Lifeline.for_groups(LIFELINE_GRACE_S)  # first: no moment without it
    try:
        pg.start()
        lifeline.add(pg.postmaster_pid())
        log = data / "mlflow-server.log"
        uri = tracking_uri(args.host, port)
        proc = start_team_server(pg.uri, args.host, port, workers=args.workers, artifacts=artifacts,
                                 folder=data, allowed_hosts=allowed_hosts(args.allowed_hosts, uri, port))
        lifeline.add(proc.pid)  # its own session: the group is MLflow and its workers
        local = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{port}"
        wait_healthy(local, proc, log_path=log, timeout=180)
        print(f"MLflow tracking server: {uri}  (PostgreSQL in {pg.pgdata}, artifacts in "
              f"{artifacts}, {args.workers} workers; log {log}; Ctrl-C stops it)")
        print("Put this line in the .env of every server of a job (and of this one):")
        print(f"MLFLOW_TRACKING_URI={uri}", flush=True)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        ended = None if proc is None else proc.poll()  # None: it served until stopped here
        if proc is not None:
            stop_server(proc)
        pg.stop()
        lifeline.release()
    return 0 if ended in (0, -15, None) else 1
