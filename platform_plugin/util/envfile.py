"""The user's `.env` files, read safely: bounded, no NUL bytes, no value a process environment
cannot carry. python-dotenv parses them; settings.py decides what the values may override.

Which files, one rule (`env_file_paths`): `--env-file FILE` names the only one; otherwise the
`.env` of the working folder and of every folder above it up to the project folder - the one
holding CODE/ when the working folder is inside a CODE/ folder - so a job started in CODE/ or
below reads the project's `.env` beside CODE/ as well as one inside; a nearer file's value wins.
Outside any CODE/ folder only the working folder's `.env` is read."""
from __future__ import annotations

import io
import os

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.project import nearby_paths
from platform_plugin.util.regular_file import FileTooLarge, NotRegularFile, read_regular_file


def env_file_paths(cwd: str, environ) -> list[str]:
    """The default `.env` files the rule looks for, nearest first."""
    return nearby_paths(cwd, environ, ".env")


def read_env_files(env_file: str | None, cwd: str, environ) -> tuple[dict[str, str], list[str]]:
    """The values of the rule's `.env` files (a nearer file's win) and the files read, nearest
    first."""
    if env_file:
        values, path = read_env_file(env_file, cwd)
        return values, [path] if path else []
    merged: dict[str, str] = {}
    read: list[str] = []
    for path in reversed(env_file_paths(cwd, environ)):
        values, found = read_env_file(None, os.path.dirname(path))
        merged.update(values)
        if found:
            read.insert(0, found)
    return merged, read


def export_mlflow_settings(cwd: str, environ) -> None:
    """MLflow's client settings (MLFLOW_TRACKING_URI, _USERNAME, _PASSWORD, ...) from the rule's
    `.env` files into `environ` where it has none: a command run by hand after the job (sync,
    compare) reaches the team server with the credentials its ranks had."""
    values, _ = read_env_files(None, cwd, environ)
    for name, value in values.items():
        if name.startswith("MLFLOW_") and name not in environ:
            environ[name] = value


def read_env_file(env_file: str | None, cwd: str) -> tuple[dict[str, str], str | None]:
    """The .env values ({} when the default ./.env does not exist, or is a folder: a virtualenv
    made with `python -m venv .env`); None values are dropped. A default ./.env that is there
    but cannot be read as a file (a FIFO, a device, a dangling link, a link loop) is refused:
    skipping it would run every rank without the user's settings."""
    path = os.path.join(cwd, env_file) if env_file else os.path.join(cwd, ".env")
    if not env_file and (not os.path.lexists(path) or os.path.isdir(path)):
        return {}, None
    # python-dotenv imports logging, tempfile and typing: loaded only when there is a file
    from dotenv.parser import parse_stream
    text = _env_file_text(path, bool(env_file))
    try:
        # the explicit file, never find_dotenv(): that searches from the caller's source file
        bindings = list(parse_stream(io.StringIO(text)))
    except ValueError as exc:
        raise ConfigError(f"cannot read env file {path}: {exc}", code="ENV_FILE_UNREADABLE")
    # python-dotenv skips a line it cannot parse with a log line naming only its number: the
    # variable the user meant to set would silently be missing from every rank
    bad = [b.original for b in bindings if b.error]
    if bad:
        raise ConfigError([Problem("ENV_FILE_SYNTAX", f"env file {path} line {o.line}: cannot "
                                   f"parse {o.string.strip()[:80]!r}: write NAME=VALUE (a quoted "
                                   "value needs its closing quote)", path) for o in bad])
    values = {b.key: b.value for b in bindings if b.key and b.value is not None}
    for name, value in values.items():
        if variable_bytes(name, value) > MAX_VARIABLE_BYTES:
            raise ConfigError([Problem("ENV_VALUE_TOO_LONG", f"{name} in {path} is "
                                       f"{len(value.encode())} bytes; a process variable holds at "
                                       f"most {MAX_VARIABLE_BYTES - 2} (Linux refuses to start the "
                                       "process: 'Argument list too long'). Put large data in a "
                                       "file and set the variable to its path.", name)])
    return values, path


# Linux's MAX_ARG_STRLEN: one NAME=VALUE string of a process environment, terminator included
MAX_VARIABLE_BYTES = 128 * 1024
MAX_ENV_FILE_BYTES = 1024 * 1024  # a .env holds settings, not data


def variable_bytes(name: str, value: str) -> int:
    """What NAME=VALUE costs of MAX_VARIABLE_BYTES: its UTF-8 bytes, `=` and the terminating NUL."""
    return len(name.encode("utf-8", "replace")) + len(value.encode("utf-8", "replace")) + 2


def _env_file_text(path: str, explicit: bool) -> str:
    """The file's text: a regular file, bounded, opened without blocking (a FIFO waits for a
    writer forever), without NUL bytes (no process variable can hold one)."""
    try:
        text = read_regular_file(path, MAX_ENV_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        try:
            target = os.readlink(path)
        except OSError:  # no such file (a default one was removed since it was seen)
            if not explicit:
                return ""
            raise ConfigError(f"env file {path} does not exist: fix --env-file.",
                              code="ENV_FILE_MISSING") from None
        raise ConfigError(f"env file {path} is a symbolic link to {target!r}, which does not "
                          "exist: fix or remove the link", code="ENV_FILE_UNREADABLE") from None
    except NotRegularFile:
        raise ConfigError(f"env file {path} is not a regular file (a folder, FIFO, device or a "
                          "link to one): a .env holds NAME=VALUE lines", code="ENV_FILE_NOT_REGULAR"
                          ) from None
    except FileTooLarge:
        raise ConfigError(f"env file {path} is over {MAX_ENV_FILE_BYTES // 1024} KiB: a .env "
                          "holds settings; put data in files.", code="ENV_FILE_TOO_LARGE") from None
    except (OSError, UnicodeDecodeError) as exc:  # a link loop (ELOOP), not UTF-8, unreadable
        raise ConfigError(f"cannot read env file {path}: {exc}", code="ENV_FILE_UNREADABLE") \
            from None
    if "\0" in text:
        line = text[:text.index("\0")].count("\n") + 1
        raise ConfigError([Problem("ENV_FILE_NUL", f"env file {path} holds a NUL byte on line "
                                   f"{line}: no process variable can carry one. Remove it (was "
                                   "the file saved by a binary tool?).", path)])
    return text
