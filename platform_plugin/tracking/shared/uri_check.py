"""MLFLOW_TRACKING_URI values that can never work, refused before a job starts (exit 2).

A tracking failure never stops a job (the points wait in the spool for `platform-run sync`),
but a URI that is wrong by its spelling is not a failure that passes: the launcher would wait
out its 30 s drain deadline after every job, and `sync` replays into the URI recorded in the job's
sink.json, so the points could never be delivered. Only what the string (and a file's first
bytes) shows is judged here - no MLflow import, no connection: a server that is down is still
the spool's business.
"""
from __future__ import annotations

import importlib.util
import os
import stat
from typing import Any, Mapping
from urllib.parse import unquote

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.tracking.shared.db_driver import driver_problem, sqlalchemy_unquotes_database

# MLflow's own tracking-store schemes (a "+driver" suffix allowed: postgresql+psycopg2)
SCHEMES = ("", "file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks",
           "databricks-uc", "uc")
SQLITE_MAGIC = b"SQLite format 3\0"
SCHEME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-."  # urllib's
VARIABLE = "MLFLOW_TRACKING_URI"


def check_tracking_uri(uri: str, where: str = VARIABLE, environ: Mapping[str, str] | None = None) -> None:
    """Raise ConfigError TRACKING_URI for a URI no MLflow client can use. `where` names its
    source in the message (the variable, `--store`, ...); `environ`: the processes' that will
    use it (MLFLOW_ALLOW_FILE_STORE), default this one's."""
    why = uri_problem(uri, environ)
    if why:
        raise ConfigError([Problem("TRACKING_URI", f"{where}={uri!r}: {why}", where)])


def uri_problem(uri: str, environ: Mapping[str, str] | None = None) -> str | None:
    scheme = scheme_of(uri)
    if scheme not in SCHEMES and not _plugin_scheme(scheme):
        return (f"MLflow knows no store of scheme {scheme!r}: use http://HOST:PORT (a tracking "
                "server), sqlite:////absolute/path/mlflow.db, postgresql+psycopg2://... or leave it unset "
                "(a sqlite file beside CODE/)")
    if scheme in ("http", "https") and not uri.split("://", 1)[1].split("/", 1)[0]:
        return "an http URI needs a host: http://HOST:PORT"
    if scheme in ("", "file") and folder_store_refused(os.environ if environ is None else environ):
        return ("this MLflow no longer opens a folder store (./mlruns): use sqlite:///"
                "mlflow.db (or `mlflow migrate-filestore`), or set MLFLOW_ALLOW_FILE_STORE=true")
    if scheme == "sqlite":
        return _sqlite_problem(uri)
    if scheme in ("postgresql", "mysql", "mssql"):
        return driver_problem(uri)
    return None


def scheme_of(uri: str) -> str:
    """As MLflow parses it (urllib's scheme): `localhost:5000` has the scheme 'localhost'; a
    path has none; `databricks` alone is Databricks' default profile. The driver suffix
    (`+psycopg2`) is dropped."""
    if uri in ("databricks", "databricks-uc", "uc"):
        return uri
    # urllib.parse.urlsplit's rule for the scheme (urlsplit itself refuses some netlocs)
    scheme, colon, _ = uri.partition(":")
    if not colon or not scheme or not (scheme[0].isascii() and scheme[0].isalpha()) \
            or scheme.strip(SCHEME_CHARS):
        return ""
    return scheme.split("+", 1)[0].lower()


PYSQLITE_OPTIONS = ("uri", "timeout", "isolation_level", "detect_types", "check_same_thread",
                    "cached_statements")  # SQLAlchemy's: the rest go to SQLite with uri=true


def sqlite_file(uri: str) -> str | None:
    """The database file of a `sqlite:///` URI (a `+driver` allowed), read as SQLAlchemy's
    pysqlite dialect reads it - MLflow hands the URI to its create_engine: the text after
    `sqlite:///` up to the first `?`, percent-decoded when the installed SQLAlchemy decodes it;
    the query holds the driver's options (`timeout=`). With `uri=true` the other options go to
    SQLite: into its `file:` form (`file:/abs/m.db?mode=ro&uri=true`: the file after `file:`),
    or, without `file:`, appended to the name (`m.db?mode=rwc&uri=true` IS the file
    'm.db?mode=rwc': SQLite reads a name without `file:` as a plain name). ':memory:' for an
    in-memory database, None for any other URI. The one rule every caller uses: taking the
    query as part of the name made the store's lock and seed a second file beside the store."""
    parts = _sqlite_parts(uri)
    return None if parts is None else parts[0]


def _sqlite_parts(uri: str) -> tuple[str, dict[str, str]] | None:
    """(file, SQLite's own URI options: {} unless `uri=true` with a `file:` name)."""
    head, sep, rest = uri.partition(":///")
    if not sep or scheme_of(head + ":") != "sqlite" or "/" in head:
        return None
    path, _, query = rest.partition("?")
    if "%" in path:
        if sqlalchemy_unquotes_database():  # 2.1 does, 2.0 takes the path as written
            path = unquote(path)
    options = dict(pair.partition("=")[::2] for pair in query.split("&") if pair)
    if options.get("uri", "").strip().lower() not in ("true", "yes", "on", "y", "t", "1"):
        return path, {}
    for name in PYSQLITE_OPTIONS:
        options.pop(name, None)
    if not path.startswith("file:"):  # as SQLAlchemy builds the name, keys sorted
        return path + ("?" + "&".join(f"{k}={options[k]}" for k in sorted(options))
                       if options else ""), {}
    # SQLite's URI filename (SQLAlchemy appends SQLite's options to it, as above): file:/abs,
    # file:///abs, file:rel; the path ends at the first '?' or '#' as written and is then
    # percent-decoded by SQLite itself (also after SQLAlchemy 2.1's own decoding), the options
    # follow the '?': 'file:x%3Fy.db' is x?y.db, 'file:x.db#f' is x.db
    name = path[len("file:"):] + ("?" + "&".join(f"{k}={options[k]}" for k in sorted(options))
                                  if options else "")
    path, _, query = name.partition("#")[0].partition("?")
    options = dict(pair.partition("=")[::2] for pair in query.split("&") if pair)
    if path.startswith("//"):
        authority, slash, tail = path[2:].partition("/")
        path = slash + tail if authority in ("", "localhost") else path
    if "%" in path:
        path = unquote(path)
    memory = options.get("mode") == "memory" or path.startswith(":memory:")
    return (":memory:" if memory else path), options


def _sqlite_problem(uri: str) -> str | None:
    path, options = _sqlite_parts(uri) or ("", {})
    if path in (None, "") or path == ":memory:":
        return ("a sqlite store must be a file every process can open (the forwarding helper "
                "and `sync` are other processes): sqlite:////absolute/path/mlflow.db")
    if options.get("mode") == "ro" or options.get("immutable", "0") not in ("", "0"):
        return "a read-only sqlite store (mode=ro, immutable) cannot take the job's points"
    try:  # never blocking: a FIFO's open() waits for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        if options.get("mode") == "rw":
            return f"{path} does not exist, and mode=rw does not create it (mode=rwc does)"
        return None  # made by the first job; a folder on the way is the folder checks' business
    except OSError as exc:
        return f"cannot open {path}: {exc.strerror}"
    try:
        kind = os.fstat(fd).st_mode
        head = os.read(fd, len(SQLITE_MAGIC)) if stat.S_ISREG(kind) else b""
    finally:
        os.close(fd)
    if not stat.S_ISREG(kind):
        return f"{path} is not a file (a folder, FIFO or device): name the database file"
    if head and head != SQLITE_MAGIC:
        return f"{path} is not a SQLite database (a file of another kind is there)"
    return None


def folder_store_refused(environ: Mapping[str, str]) -> bool:
    """MLflow 3.x releases that refuse a folder store unless MLFLOW_ALLOW_FILE_STORE is true
    (read from MLflow's source text: importing MLflow costs seconds)."""
    if environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("true", "1"):
        return False
    try:
        spec = importlib.util.find_spec("mlflow")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin:
        return False
    path = os.path.join(os.path.dirname(spec.origin), "store", "tracking", "file_store.py")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "MLFLOW_ALLOW_FILE_STORE.get()" in fh.read()
    except OSError:
        return False


def _plugin_scheme(scheme: str) -> bool:
    """A scheme an installed MLflow plugin registers (entry point group mlflow.tracking_store)."""
    from importlib.metadata import entry_points  # (heavy: email, csv, zipfile; rare schemes only)
    groups: Any = entry_points()  # Python 3.9's is a dict; 3.10+ selects
    found = (groups.select(group="mlflow.tracking_store") if hasattr(groups, "select")
             else groups.get("mlflow.tracking_store", []))
    return any(ep.name == scheme for ep in found)
