"""A PostgreSQL cluster of our own for a team's MLflow server (and for the test suite).

Uses the server binaries of Debian's postgresql package (`initdb`, `pg_ctl`, `postgres`:
/usr/lib/postgresql/<version>/bin, or on PATH). PostgreSQL refuses to run as root: when we are
root, the cluster belongs to the `postgres` system user the package creates and its commands
run through `runuser -u postgres`. The cluster listens on 127.0.0.1 only (TCP, no Unix socket);
only the MLflow server on the same machine talks to it, with a generated password kept in
`<data dir>/password` (mode 600) and passed to MLflow in its environment, never on a command
line and never printed.
"""
from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from platform_plugin.errors import PlatformPluginError
from platform_plugin.util.children import Started, run_in_own_session

DB_USER = "platform"
HOST = "127.0.0.1"


def pg_bin() -> Path | None:
    """The folder of the newest installed `initdb`/`pg_ctl`, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def missing_reason() -> str | None:
    if pg_bin() is None:
        return ("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: "
                "apt-get install postgresql-15 (scripts/system-deps.sh does it)")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run PostgreSQL as"
    return None


def unreachable_parent(path: Path) -> Path | None:
    """When we are root, the first existing parent of `path` that the `postgres` user cannot
    pass through (it runs PostgreSQL inside `path`), else None."""
    if os.geteuid() != 0:
        return None
    uid = pwd.getpwnam("postgres").pw_uid
    for parent in reversed(Path(path).resolve().parents):
        try:
            st = parent.stat()
        except FileNotFoundError:
            break
        if not (st.st_mode & 0o001 or (st.st_uid == uid and st.st_mode & 0o100)):
            return parent
    return None


class LocalPostgres:
    """`start()` creates the cluster on first use, starts it and makes the database;
    `stop()` stops it. `uri` is the SQLAlchemy URI MLflow needs (holds the password)."""

    def __init__(self, data_dir: str | os.PathLike, port: int, database: str = "mlflow", *,
                 started: Started | None = None):
        """`started`: called with the process group of every child started (initdb, pg_ctl)
        and with the postmaster's pid as soon as it is known: a lifeline stops them all when
        the caller dies, SIGKILLed included (util/children.py)."""
        self.started_hook = started
        self.root = Path(data_dir).resolve()
        self.pgdata = self.root / "pgdata"
        self.port, self.database = port, database
        self.log = self.root / "postgres.log"
        self.bin = pg_bin()
        self.as_postgres = os.geteuid() == 0
        self.started = False  # by this object: stop() never stops a cluster another process runs

    @property
    def uri(self) -> str:
        return self.database_uri(self.database)

    def database_uri(self, database: str) -> str:
        """The SQLAlchemy URI of a database of this cluster (holds the password)."""
        return f"postgresql+psycopg2://{DB_USER}:{self._password()}@{HOST}:{self.port}/{database}"

    @property
    def initialised(self) -> bool:
        return (self.pgdata / "PG_VERSION").exists()

    def _password(self) -> str:
        path = self.root / "password"
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(24))
        return path.read_text().strip()

    def _bin(self) -> Path:
        if self.bin is None:
            raise PlatformPluginError(missing_reason() or "PostgreSQL not found")
        return self.bin

    def _run(self, *args: str, check: bool = True,
             while_waiting: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
        cmd = [str(self._bin() / args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = run_in_own_session(cmd, self.started_hook, while_waiting=while_waiting,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if check and done.returncode != 0:
            raise PlatformPluginError(f"{args[0]} failed (exit {done.returncode}): "
                                      f"{(done.stderr or done.stdout).strip()[-1500:]}")
        return done

    def _own(self, path: Path) -> None:
        if self.as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def init(self) -> None:
        if self.initialised:
            return
        self._bin()  # refused before the folder exists
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # the postgres user must reach its folder, nothing more
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        self._own(self.pgdata)
        pwfile = self.root / ".initdb-pw"
        pwfile.write_text(self._password() + "\n")
        os.chmod(pwfile, 0o600)
        self._own(pwfile)
        try:
            self._run("initdb", "-D", str(self.pgdata), "-U", DB_USER, "-E", "UTF8",
                      "--auth-local=peer", "--auth-host=scram-sha-256", f"--pwfile={pwfile}")
        finally:
            pwfile.unlink()

    def start(self) -> None:
        self.init()
        if not self.log.exists():
            self.log.touch()
            self._own(self.log)
        options = f"-p {self.port} -c listen_addresses={HOST} -c unix_socket_directories=''"
        announced: list[int] = []

        def announce_postmaster() -> None:  # while pg_ctl waits for it to accept connections
            pid = self._postmaster_pid_if_written()
            if pid is not None and not announced and self.started_hook is not None:
                announced.append(pid)
                self.started_hook(pid)  # its own session: the group is the postmaster alone
        self._run("pg_ctl", "-D", str(self.pgdata), "-o", options, "-l", str(self.log), "-w",
                  "-t", "60", "start", while_waiting=announce_postmaster)
        self.started = True
        self.create_database(self.database)

    def create_database(self, database: str) -> None:
        """Create `database` in the running cluster unless it exists."""
        import psycopg2
        conn = psycopg2.connect(host=HOST, port=self.port, user=DB_USER,
                                password=self._password(), dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{database}"')
        finally:
            conn.close()

    def postmaster_pid(self) -> int:
        """The running server's pid (first line of postmaster.pid). The postmaster leads a
        session of its own, and so does each of its children: a signal to its group reaches the
        postmaster alone, which shuts the cluster down cleanly (SIGTERM = smart shutdown)."""
        return int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])

    def _postmaster_pid_if_written(self) -> int | None:
        try:
            first = (self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:  # not written yet (or a folder the postgres user closed to us)
            return None
        return int(first) if first.isdigit() else None

    def stop(self) -> None:
        """Stop the cluster this object started (a second server's failed start on the same
        data folder stopped the first server's cluster: its MLflow lost its database)."""
        if self.started and (self.pgdata / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop", check=False)
