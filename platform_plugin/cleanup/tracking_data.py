"""Tracking data cleanup must never delete: the configured MLflow store and spools that still
hold undelivered records.

- `store_paths(root, environ)`: what MLFLOW_TRACKING_URI (the process environment, and the
  `.env` files a job started in ROOT reads: util/envfile.py's rule, e.g. the project's `.env`
  beside CODE/) and the jobs' `sink.json` files point to — a sqlite file with its companions and
  artifact folder, or a file store folder. The default names (`mlflow.db*`, `mlruns/`,
  `mlartifacts/`) are protected by name in `rules.py`, wherever they are.
- `spool_hold(folder, names)`: why a folder must stay whole because it is (or holds, in a
  `tracking*/` subfolder) a spool with records not yet delivered or runs not yet ended. The
  job folder stays as a whole: `platform-run sync` uploads the rank logs next to the spool.

Pending counts come from the tracking package itself (the forwarder's own `counts()`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import unquote, urlparse

from platform_plugin.tracking.delivery.forwarder import Forwarder
from platform_plugin.tracking.shared.state import SINK_FILE, SinkConfig
from platform_plugin.tracking.shared.uri_check import sqlite_file
from platform_plugin.tracking.rank.spool import SPOOL_SUFFIX
from platform_plugin.util.envfile import env_file_paths, read_env_file
from platform_plugin.util.regular_file import read_json, read_regular_file

URI_VARIABLE = "MLFLOW_TRACKING_URI"
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal", ".lock")
ENV_FILE_MAX_BYTES = 1 << 20
JOB_SINK_GLOBS = ("platform_logs/*/tracking*/" + SINK_FILE,
                  "*/platform_logs/*/tracking*/" + SINK_FILE)
MAX_JOB_SINKS = 1000  # enough for every job of a CODE/; a bound on what a cleanup reads first


def store_paths(root: Path, environ: Mapping[str, str]) -> list[Path]:
    """Local paths of the tracking stores in use (inside ROOT or not; the caller filters)."""
    uris = [environ.get(URI_VARIABLE), *_uris_from_env_files(root, environ), *_job_uris(root)]
    paths: list[Path] = []
    for uri in dict.fromkeys(u for u in uris if u):
        paths += uri_paths(uri, bases=(Path.cwd(), root))
    return paths


def uri_paths(uri: str, *, bases: Iterable[Path]) -> list[Path]:
    """The files and folders a tracking URI keeps its data in. A relative path is taken
    relative to each of `bases` (the cwd and ROOT: a run may have started in either)."""
    parsed = urlparse(uri)
    raw = sqlite_file(uri)  # also sqlite+pysqlite:///, and without the query (?timeout=)
    if raw is not None:
        dbs = _anchored("" if raw == ":memory:" else raw, bases)
        return [Path(f"{db}{suffix}") for db in dbs for suffix in SQLITE_COMPANIONS] + \
            [db.parent / "mlartifacts" for db in dbs]
    if parsed.scheme == "file":
        return _anchored(unquote(parsed.path), bases)
    if parsed.scheme == "" and uri.strip():
        return _anchored(uri.strip(), bases)  # MLflow takes a bare path for a file store
    return []  # a server or a database elsewhere: nothing local to protect


def _anchored(raw: str, bases: Iterable[Path]) -> list[Path]:
    if not raw:
        return []
    path = Path(raw)
    return [path] if path.is_absolute() else [base / path for base in bases]


def _uris_from_env_files(root: Path, environ: Mapping[str, str]) -> list[str]:
    """MLFLOW_TRACKING_URI of every `.env` a job started in ROOT reads (envfile's rule: ROOT's
    and those above it up to the project folder), parsed as the settings parse them. Each
    file's store is kept, not only the nearest one's: the environment or a job started below
    ROOT may choose another of them, and keeping a store is the safe side."""
    uris = []
    for path in env_file_paths(str(root), environ):
        try:  # never blocking: open() of a FIFO .env waited for a writer forever (clean hung)
            head = read_regular_file(path, ENV_FILE_MAX_BYTES)
        except OSError:  # none, not a regular file, too large: the settings report it, not us
            continue
        if URI_VARIABLE.encode() not in head:
            continue
        try:
            values, _ = read_env_file(None, os.path.dirname(path))
        except Exception:  # noqa: BLE001 - a broken .env is the settings' error to report, not ours
            continue
        if values.get(URI_VARIABLE):
            uris.append(values[URI_VARIABLE])
    return uris


def _job_uris(root: Path) -> list[str]:
    """The stores the jobs in ROOT's log folders wrote to (their `sink.json`)."""
    uris = []
    for pattern in JOB_SINK_GLOBS:
        for index, sink in enumerate(root.glob(pattern)):
            if index >= MAX_JOB_SINKS:
                break
            uri = _read_sink(sink).get("tracking_uri")
            if isinstance(uri, str):
                uris.append(uri)
    return uris


def _read_sink(path: Path) -> dict:
    try:  # a FIFO named sink.json must not hang the cleanup (a log folder may be a link: kept)
        data = read_json(str(path), ENV_FILE_MAX_BYTES, within=str(path.parent))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ------------------------------------------------------------------ spools

def spool_hold(folder: Path, entries: list[os.DirEntry]) -> str | None:
    """Why `folder` must stay whole (it is or holds an undelivered spool), else None."""
    spools = [folder] if any(_is_spool_file(e.name) for e in entries) else []
    spools += [folder / e.name for e in entries
               if e.name.startswith("tracking") and e.is_dir(follow_symlinks=False)
               and os.path.isfile(folder / e.name / SINK_FILE)]
    reasons = [reason for reason in map(_undelivered, spools) if reason]
    return "; ".join(reasons) or None


def _is_spool_file(name: str) -> bool:
    return name == SINK_FILE or (name.startswith("rank_") and name.endswith(SPOOL_SUFFIX))


def _undelivered(spool_dir: Path) -> str | None:
    try:
        config = SinkConfig.load(spool_dir)
        pending = Forwarder(spool_dir, config, None).counts().pending  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - unreadable: keep it, that is the safe side
        return f"tracking spool {spool_dir.name}/ could not be read ({type(exc).__name__}: {exc})"
    if pending:
        return f"{pending} tracking records not delivered yet (platform-run sync delivers them)"
    if config is not None and not config.ended:
        return "its tracking runs were not ended yet (platform-run sync ends them)"
    return None
