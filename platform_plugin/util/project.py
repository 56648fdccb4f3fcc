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


PROJECT_FILE = "platform.toml"
LAUNCH_TABLE = "launch"
MAX_PROJECT_FILE_BYTES = 1 << 20  # settings, not data


def nearby_paths(cwd: str | os.PathLike | None, environ, name: str) -> list[str]:
    """`name` in the working folder and in every folder above it up to the project folder,
    nearest first (the `.env` rule: util/envfile.py)."""
    folder = os.path.abspath(cwd or os.getcwd())
    top = project_dir(folder, environ)
    paths = [os.path.join(folder, name)]
    while folder != top and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
        paths.append(os.path.join(folder, name))
    return paths


def launch_settings(cwd: str | os.PathLike | None, environ) -> tuple[dict, str | None]:
    """The `[launch]` table of the nearest platform.toml (the project's launch defaults, beside
    its notebook parameters) and that file; ({}, None) when there is none. A file that is there
    but unreadable, not TOML, or whose `[launch]` is no table is refused (LAUNCH_PROJECT_FILE):
    skipping it would run the job without the project's settings."""
    from platform_plugin.errors import ConfigError, Problem
    from platform_plugin.util.regular_file import read_regular_file
    from platform_plugin.util.toml import loads, tomllib
    for path in nearby_paths(cwd, environ, PROJECT_FILE):
        try:
            text = read_regular_file(path, MAX_PROJECT_FILE_BYTES).decode("utf-8")
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:  # not a regular file, too large, not UTF-8
            raise ConfigError([Problem("LAUNCH_PROJECT_FILE", f"{path} cannot be read: {exc}",
                                       path)]) from None
        try:
            table = loads(text).get(LAUNCH_TABLE, {})
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError([Problem("LAUNCH_PROJECT_FILE", f"{path} is not valid TOML: {exc}",
                                       path)]) from None
        if not isinstance(table, dict):
            raise ConfigError([Problem("LAUNCH_PROJECT_FILE", f"{path}: [{LAUNCH_TABLE}] must be "
                                       "a table, e.g. [launch] metrics_from_output = '...'",
                                       path)])
        return table, path
    return {}, None
