"""Whether the database driver a tracking URI needs is installed, asked as SQLAlchemy asks it.

MLflow hands a database URI (`postgresql://`, `mysql+pymysql://`, ...) to SQLAlchemy's
`create_engine`, which loads the DBAPI module of the URI's `+driver`, or of the dialect's
default driver when none is named. Without that module every point of a job would wait out the
drain deadline and fail in the forwarding helper ("No module named 'psycopg'") - and the
default differs between SQLAlchemy releases (2.0: postgresql -> psycopg2, 2.1: psycopg), so a
`postgresql://` URI that worked can stop working after an upgrade. The default is read from the
installed SQLAlchemy's source (`base.dialect = dialect = <driver>.dialect` in the dialect's
package): importing SQLAlchemy would delay every launch before its ranks start. Only this module's
question is answered here; a database that is down stays the spool's business.
"""
from __future__ import annotations

import importlib.util
import os

# SQLAlchemy's driver names -> the module its dialect imports (import_dbapi), pip's name for it
DRIVERS = {
    "psycopg2": ("psycopg2", "psycopg2-binary"), "psycopg": ("psycopg", "'psycopg[binary]'"),
    "pg8000": ("pg8000", "pg8000"), "psycopg2cffi": ("psycopg2cffi", "psycopg2cffi"),
    "mysqldb": ("MySQLdb", "mysqlclient"), "pymysql": ("pymysql", "pymysql"),
    "mysqlconnector": ("mysql.connector", "mysql-connector-python"),
    "mariadbconnector": ("mariadb", "mariadb"), "cymysql": ("cymysql", "cymysql"),
    "pyodbc": ("pyodbc", "pyodbc"), "pymssql": ("pymssql", "pymssql"),
    "pysqlite": ("sqlite3", "(Python's own sqlite3)"),
}
DEFAULT_MARK = "base.dialect = dialect = "  # the line that names a dialect's default driver


def driver_problem(uri: str) -> str | None:
    """Why SQLAlchemy could not load the driver of this database URI, or None (it can, or the
    driver is one this table does not know: a third-party dialect is let through)."""
    name = uri.split(":", 1)[0].lower()
    dialect, _, driver = name.partition("+")
    named = bool(driver)
    driver = driver or default_driver(dialect) or ""
    if driver not in DRIVERS or installed(DRIVERS[driver][0]):
        return None
    module, package = DRIVERS[driver]
    how = f"`+{driver}` in the URI" if named else f"{dialect}'s default driver in this SQLAlchemy"
    usable = [d for d in alternatives(dialect) if d != driver]
    instead = (f", or name an installed one: {dialect}+{usable[0]}://..." if usable else "")
    return (f"MLflow opens a {dialect} store through SQLAlchemy, which needs the module "
            f"{module!r} ({how}) and it is not installed: pip install {package}{instead}")


def default_driver(dialect: str) -> str | None:
    """The driver SQLAlchemy's `<dialect>://` uses, from its source; None when unknown."""
    try:
        spec = importlib.util.find_spec("sqlalchemy")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not dialect.isidentifier():
        return None
    path = os.path.join(os.path.dirname(spec.origin), "dialects", dialect, "__init__.py")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    start = text.find(DEFAULT_MARK)
    if start < 0:
        return None
    found = text[start + len(DEFAULT_MARK):].split(".", 1)[0].strip()
    return found if found.isidentifier() else None


def installed(module: str) -> bool:
    """find_spec of the module and each package above it, without importing the module."""
    parts = module.split(".")
    try:
        return all(importlib.util.find_spec(".".join(parts[:i + 1])) is not None
                   for i in range(len(parts)))
    except (ImportError, ValueError):
        return False


def alternatives(dialect: str) -> list[str]:
    """Installed drivers SQLAlchemy has for this dialect (for the refusal's hint)."""
    known = {"postgresql": ("psycopg2", "psycopg", "pg8000"),
             "mysql": ("pymysql", "mysqldb", "mysqlconnector"), "mssql": ("pyodbc", "pymssql")}
    return [d for d in known.get(dialect, ()) if installed(DRIVERS[d][0])]


def sqlalchemy_unquotes_database() -> bool:
    """SQLAlchemy 2.1 percent-decodes a URL's database part (`a%20b.db` is the file `a b.db`),
    2.0 takes it as written: asked of the installed one's source (engine/url.py)."""
    try:
        spec = importlib.util.find_spec("sqlalchemy")
        if spec is None or not spec.origin:
            return False
        with open(os.path.join(os.path.dirname(spec.origin), "engine", "url.py"),
                  encoding="utf-8", errors="replace") as fh:
            return '"username", "password", "database"' in fh.read()
    except (ImportError, ValueError, OSError):
        return False
