"""Where a project's folders are: the platform's snapshotted CODE/ folder around a working
folder, and the project folder that holds it (the MLflow store, `.env` discovery, experiment
names all start from these)."""
from __future__ import annotations

import os

CODE_DIR_ENV = "PLATFORM_CODE_DIR"
CODE_DIR_NAME = "CODE"


def ancestors(path: str):
    """`path`, then each folder above it up to the root."""
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def code_dir(cwd: str | os.PathLike | None, environ) -> str | None:
    """The platform's snapshotted folder the ranks run in, if any: PLATFORM_CODE_DIR, else the
    nearest ancestor of `cwd` named CODE."""
    start = os.path.abspath(cwd or os.getcwd())
    if environ.get(CODE_DIR_ENV):
        explicit = os.path.realpath(environ[CODE_DIR_ENV])
        return explicit if start == explicit or start.startswith(explicit.rstrip(os.sep) + os.sep) else None
    return next((d for d in ancestors(start) if os.path.basename(d) == CODE_DIR_NAME), None)


def project_dir(cwd: str | os.PathLike | None, environ) -> str:
    """The folder holding CODE/ when the ranks run inside one, else the ranks' folder."""
    code = code_dir(cwd, environ)
    return os.path.dirname(code) if code is not None else os.path.abspath(cwd or os.getcwd())
