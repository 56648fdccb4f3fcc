"""HCCL rank tables: parse, validate, choose this server.

No subprocess and no writes; it reads files (the table, and /proc/net for this host's
addresses). The pieces live in `model` (types, DEVICE_ID arithmetic),
`formats` (readers for 1.0 / group_list / board, writer of 1.0) and
`rules` (the rules); this package is the public surface.
"""
from __future__ import annotations

import ipaddress
import json
import socket
import time

from platform_plugin.errors import Problem, errors_only
from platform_plugin.ranktable.formats import read_document, to_hccl_dict
from platform_plugin.ranktable.model import (Device, RankTable, RankTableError, Server,
    describe_ranges, parse_visible_devices, runtime_device_id)
from platform_plugin.ranktable.rules import RULES, check_environment, validate
from platform_plugin.util.regular_file import FileTooLarge, NotRegularFile, read_regular_file

__all__ = [
    "Device", "Server", "RankTable", "RankTableError", "parse", "load", "validate",
    "check_environment", "select_server", "host_addresses", "runtime_device_id",
    "parse_visible_devices", "to_hccl_dict", "wait_until_completed", "RULES",
]


def parse(data: dict | str | bytes, *, path: str | None = None
          ) -> tuple[RankTable | None, list[Problem]]:
    """Parse a decoded or raw JSON table. Never raises on bad input: returns (table|None, problems)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and bad UTF-8 bytes
            where = (f" (line {exc.lineno}, column {exc.colno})"
                     if isinstance(exc, json.JSONDecodeError) else "")
            return None, [Problem("RT_JSON", f"not valid JSON{where}: {exc}. Fix the file or "
                                  "regenerate it with `platform-run ranktable generate`.", "")]
    table, problems = read_document(data)
    if table is not None and path is not None:
        table = RankTable(table.version, table.servers, table.status, path,
                          table.converted_from, table.declared_server_count)
    return table, problems


# hccl_tools writes ~175 bytes a rank: 64 MiB is over 300,000 ranks. Past it a file is not a
# table, and reading it whole (a log given by mistake) would take the memory first.
MAX_TABLE_BYTES = 64 << 20


def _read_text(path: str) -> str:
    """The file's text. Only a regular file (util/regular_file.py): the table is also read more
    than once (waiting for "completed", then by the launcher), which a pipe cannot be."""
    try:
        return read_regular_file(path, MAX_TABLE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise RankTableError(f"rank table {path} does not exist: check RANK_TABLE_FILE / the "
                             "path you gave.", code="RT_FILE_MISSING") from None
    except NotRegularFile:
        raise RankTableError(f"rank table {path} is not a regular file (a folder, device or "
                             "pipe): give the JSON file itself; it is read more than once.",
                             code="RT_FILE_NOT_REGULAR") from None
    except FileTooLarge:
        raise RankTableError(f"rank table {path} is over {MAX_TABLE_BYTES >> 20} MiB: not a "
                             "rank table (hccl_tools writes ~175 bytes a rank). Check "
                             "RANK_TABLE_FILE / the path you gave.", code="RT_FILE_TOO_LARGE"
                             ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
        raise RankTableError(f"cannot read rank table {path!r}: {exc}",
                             code="RT_FILE_UNREADABLE") from None


def parse_file(path: str) -> tuple[RankTable | None, list[Problem]]:
    """Read and parse (not validate); a missing or unreadable file raises RankTableError."""
    return parse(_read_text(path), path=path)


def check_file(path: str) -> tuple[RankTable | None, list[Problem]]:
    """Everything `platform-run ranktable check` reports: parse + every rule."""
    table, problems = parse_file(path)
    if table is not None:
        problems = problems + validate(table)
    return table, problems


def wait_until_completed(path: str, timeout: float, *, interval: float = 0.5) -> None:
    """Poll `path` until its status is "completed" or `timeout` seconds pass.

    The platform writes the table asynchronously and flips status to "completed" last, so a
    job that starts early sees "initializing" (or a half-written file) for a moment.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            table, _ = parse_file(path)
        except RankTableError:
            table = None
        if table is not None and table.status == "completed":
            return
        if time.monotonic() >= deadline:
            return  # the caller's validation reports the status (or whatever else is wrong)
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def load(path: str, *, wait_timeout: float | None = None) -> RankTable:
    """Read + parse + validate; raises RankTableError listing every error-level problem.

    `wait_timeout`: seconds to wait for status "completed" before judging the table.
    """
    if wait_timeout:
        wait_until_completed(path, wait_timeout)
    table, problems = check_file(path)
    errors = errors_only(problems)
    if table is None or errors:
        raise RankTableError(errors or problems)
    return table


def select_server(table: RankTable, *, rank_start: int | None = None,
                  local_addresses: set[str] | None = None) -> Server:
    """This server: by RANK_START, else server_id among local addresses, else the only server;
    raises RankTableError for an ambiguous multi-server table (never silently server 0).

    `local_addresses` None reads this host's addresses (`host_addresses()`); tests pass a set.
    """
    servers = [s for s in table.servers if s.devices]
    if rank_start is not None:
        for server in servers:
            if server.first_rank == rank_start:
                return server
        starts = ", ".join(f"{s.first_rank} (server {s.server_id})" for s in servers)
        raise RankTableError([Problem("RT_ENV_RANK_START", f"RANK_START={rank_start} is not the "
                                      f"first rank of any server; valid values: {starts}.",
                                      "RANK_START")])
    addresses = host_addresses() if local_addresses is None else local_addresses
    matches = [s for s in servers if s.server_id.strip() in addresses]
    if len(matches) == 1:
        return matches[0]
    if len(servers) == 1:
        return servers[0]
    listed = "; ".join(f"{s.server_id} (RANK_START={s.first_rank})" for s in servers)
    reason = ("several servers match this host's addresses" if matches
              else "no server_id matches an address of this host")
    raise RankTableError([Problem("RT_SERVER_UNKNOWN", f"cannot tell which server of this "
                                  f"{len(servers)}-server table this host is: {reason}. Set "
                                  f"RANK_START to this server's first rank: {listed}.",
                                  "server_list")])


def host_addresses() -> set[str]:
    """IP addresses (and the hostname) of this host, read without running any command.

    /proc/net/fib_trie lists every local IPv4 address as a "/32 host LOCAL" entry and
    /proc/net/if_inet6 the IPv6 ones; the hostname covers tables that use names as server_id.
    """
    found = {socket.gethostname()}
    try:
        with open("/proc/net/fib_trie", encoding="ascii", errors="replace") as handle:
            previous = ""
            for line in handle:
                text = line.strip()
                if text.startswith("/32 host LOCAL"):
                    found.add(previous.split()[-1])
                previous = text
    except OSError:
        pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii", errors="replace") as handle:
            for line in handle:
                raw = line.split()[0] if line.split() else ""
                if len(raw) == 32:
                    found.add(str(ipaddress.IPv6Address(bytes.fromhex(raw))))
    except OSError:
        pass
    return {a for a in found if a}


def rank_summary(table: RankTable) -> str:
    """One line: "2 servers, 16 ranks (0-15)" — used in messages and `platform-run env`."""
    ranks = [d.rank_id for s in table.servers for d in s.devices]
    return (f"{len(table.servers)} server(s), {table.rank_size} rank(s) "
            f"({describe_ranges(ranks)})")
