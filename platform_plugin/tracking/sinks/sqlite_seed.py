"""A fresh sqlite store from a copy of MLflow's own empty schema.

MLflow creates a fresh sqlite store by running its whole chain of schema migrations, each in a
transaction of its own: 5-10 s of fsyncs on a busy disk (measured: docs/benchmarks.md,
tracking), in front of the first point of a project's first job. The result is the same empty
schema every time for one MLflow version, so the first store made with that version is kept as
a template (without its Default experiment, which holds the creating folder's artifact path:
MLflow makes it again when it opens the copy) and later fresh stores are copies of it. MLflow
still opens the copy itself and checks its schema version; a template that cannot be made or
read only means MLflow creates the store itself.

Called under the store's lock (sinks/mlflow_sink.store_lock), so one process at a time.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from platform_plugin.variables import PLATFORM_CACHE_DIR


def template_path(version: str) -> Path:
    root = PLATFORM_CACHE_DIR.get() or os.path.join(os.path.expanduser("~"), ".cache", "platform_plugin")
    return Path(root) / "mlflow-store-templates" / f"mlflow-{version}.db"


def seed(db: Path, version: str) -> bool:
    """Copy the template to `db` when `db` does not exist yet; True when it did."""
    template = template_path(version)
    if db.exists() or not template.is_file():
        return False
    tmp = db.with_name(f".{db.name}.{os.getpid()}.seed")
    try:
        shutil.copyfile(template, tmp)
        _fsync(tmp)
        os.replace(tmp, db)  # the store appears whole or not at all
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def keep_template(db: Path, version: str) -> None:
    """After MLflow created `db` (and before anything was logged into it): keep a copy of its
    empty schema as the template for this MLflow version. Best effort."""
    template = template_path(version)
    if template.is_file():
        return
    tmp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(db, tmp)
        with sqlite3.connect(tmp) as con:
            if con.execute("SELECT count(*) FROM runs").fetchone()[0]:
                raise sqlite3.DatabaseError("not empty")  # something was logged already
            con.execute("DELETE FROM experiment_tags")
            con.execute("DELETE FROM experiments")
        con.close()
        _fsync(tmp)
        os.replace(tmp, template)
    except (OSError, sqlite3.Error):
        tmp.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
