"""The rules HCCL enforces on a rank table, and the environment's agreement with it.

`RULES` is the registry `validate` runs, in order; each rule gets the parsed table and returns
its problems (stable `code`, JSON `path`, a message that says what to fix). Field-level rules
(every value a JSON string, integers parse, fields present) are found while reading the file,
in `formats`, because the parsed `RankTable` no longer knows how a value was written.
"""
from __future__ import annotations

from typing import Callable

from platform_plugin.errors import Problem
from platform_plugin.util.hosts import is_host, is_ip
from platform_plugin.util.numbers import whole_number
from platform_plugin.ranktable.model import (RankTable, RankTableError, describe_ranges,
    runtime_device_id, unknown_rank_problem)

MAX_DEVICES_PER_SERVER = 16  # Ascend servers carry 8 (910) or 16 (910B/A3 boards) NPUs


def _srv(i: int) -> str:
    return f"server_list[{i}]"


def rule_server_count(table: RankTable) -> list[Problem]:
    declared, actual = table.declared_server_count, len(table.servers)
    if declared is None or declared == actual:
        return []
    return [Problem("RT_SERVER_COUNT", f"server_count says {declared} but server_list holds "
                    f"{actual} server(s); set server_count to \"{actual}\".", "server_count")]


def rule_servers_present(table: RankTable) -> list[Problem]:
    if table.servers:
        return []
    return [Problem("RT_NO_SERVERS", "server_list is empty: a rank table needs at least one "
                    "server with its devices.", "server_list")]


def rule_server_ids(table: RankTable) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, server in enumerate(table.servers):
        path = f"{_srv(i)}.server_id"
        if not server.server_id.strip():
            problems.append(Problem("RT_SERVER_ID_EMPTY", "server_id is empty: set it to the "
                                    "server's host IP address.", path))
        elif not is_host(server.server_id.strip()):
            problems.append(Problem("RT_SERVER_ID_INVALID", f"server_id "
                                    f"{server.server_id[:80]!r} is neither an IP address nor a "
                                    "host name: set it to the server's host IP address (it "
                                    "becomes PLATFORM_SERVER_ID and a tracking tag).", path))
        elif server.server_id in seen:
            problems.append(Problem("RT_SERVER_ID_DUPLICATE", f"server_id {server.server_id!r} "
                                    f"is also {_srv(seen[server.server_id])}; every server "
                                    "appears once (merge device lists, or fix the IP).", path))
        else:
            seen[server.server_id] = i
    return problems


def rule_devices_present(table: RankTable) -> list[Problem]:
    return [Problem("RT_NO_DEVICES", f"server {s.server_id!r} lists no devices: add its "
                    "device entries or remove the server (and fix server_count).",
                    f"{_srv(i)}.device")
            for i, s in enumerate(table.servers) if not s.devices]


def rule_device_ids(table: RankTable) -> list[Problem]:
    problems = []
    for i, server in enumerate(table.servers):
        seen: dict[int, int] = {}
        if len(server.devices) > MAX_DEVICES_PER_SERVER:
            problems.append(Problem("RT_TOO_MANY_DEVICES", f"server {server.server_id!r} lists "
                                    f"{len(server.devices)} devices; a server has at most "
                                    f"{MAX_DEVICES_PER_SERVER}.", f"{_srv(i)}.device"))
        for j, device in enumerate(server.devices):
            path = f"{_srv(i)}.device[{j}].device_id"
            if device.device_id >= MAX_DEVICES_PER_SERVER:
                problems.append(Problem("RT_DEVICE_ID_RANGE", f"device_id {device.device_id} "
                                        f"does not exist: physical ids are 0-"
                                        f"{MAX_DEVICES_PER_SERVER - 1} (see `npu-smi info`).",
                                        path))
            if device.device_id in seen:
                problems.append(Problem("RT_DEVICE_ID_DUPLICATE", f"device_id "
                                        f"{device.device_id} appears twice on server "
                                        f"{server.server_id!r} (also device[{seen[device.device_id]}"
                                        "]); each NPU carries one rank.", path))
            else:
                seen[device.device_id] = j
    return problems


def rule_device_ips(table: RankTable) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    multi = len(table.servers) > 1
    for i, server in enumerate(table.servers):
        for j, device in enumerate(server.devices):
            path = f"{_srv(i)}.device[{j}].device_ip"
            ip = device.device_ip
            if ip is None:
                if multi:
                    problems.append(Problem("RT_DEVICE_IP_MISSING", "device_ip is required when "
                                            "the table has more than one server (HCCL connects "
                                            "the NPUs' own NICs): take it from /etc/hccn.conf or "
                                            "`hccn_tool -i N -ip -g`.", path))
                continue
            if not is_ip(ip.strip()):
                problems.append(Problem("RT_DEVICE_IP_INVALID", f"device_ip {ip!r} is not an IP "
                                        "address: use the NPU NIC address from /etc/hccn.conf "
                                        f"(address_{device.device_id}=...).", path))
                continue
            if ip in seen:
                problems.append(Problem("RT_DEVICE_IP_DUPLICATE", f"device_ip {ip} is also used "
                                        f"by {seen[ip]}; every NPU has its own address.", path))
            else:
                seen[ip] = f"{_srv(i)}.device[{j}]"
    return problems


def rule_rank_ids(table: RankTable) -> list[Problem]:
    size = table.rank_size
    problems: list[Problem] = []
    seen: dict[int, str] = {}
    for i, server in enumerate(table.servers):
        for j, device in enumerate(server.devices):
            path = f"{_srv(i)}.device[{j}].rank_id"
            if device.rank_id >= size:
                problems.append(Problem("RT_RANK_OUT_OF_RANGE", f"rank_id {device.rank_id} is "
                                        f"outside 0..{size - 1}: the table has {size} devices, "
                                        "so rank_ids are exactly 0..N-1.", path))
            if device.rank_id in seen:
                problems.append(Problem("RT_RANK_DUPLICATE", f"rank_id {device.rank_id} is also "
                                        f"used by {seen[device.rank_id]}; each rank appears once.",
                                        path))
            else:
                seen[device.rank_id] = f"{_srv(i)}.device[{j}]"
    missing = [r for r in range(size) if r not in seen]
    if missing:
        problems.append(Problem("RT_RANK_GAP", f"rank_ids {describe_ranges(missing)} are "
                                f"missing: with {size} devices the ranks must be exactly 0-"
                                f"{size - 1} with no gap (renumber them, or use `platform-run "
                                "ranktable merge`, which renumbers).", "server_list"))
    return problems


def rule_rank_order(table: RankTable) -> list[Problem]:
    """MindSpore numbers ranks server by server: the first server holds 0..7, the next 8..15.

    A server whose ranks are not one contiguous block following the previous server's block
    gets ranks HCCL groups by server inconsistently (RANK_START then names no server).
    """
    problems, expected = [], 0
    for i, server in enumerate(table.servers):
        ranks = server.rank_ids
        if not ranks:
            continue
        block = tuple(range(expected, expected + len(ranks)))
        if ranks != block:
            problems.append(Problem("RT_RANK_ORDER", f"server {server.server_id!r} holds ranks "
                                    f"{describe_ranges(list(ranks))}; in server_list order they "
                                    f"must be the contiguous block {describe_ranges(list(block))}"
                                    " (ranks numbered server by server). Renumber with "
                                    "`platform-run ranktable merge`.", f"{_srv(i)}.device"))
        expected += len(ranks)
    return problems


def rule_status(table: RankTable) -> list[Problem]:
    if table.status == "completed":
        return []
    return [Problem("RT_STATUS", f"status is {table.status!r}, not \"completed\": the platform "
                    "is still writing this table. Wait and retry (`platform-run ranktable check "
                    "FILE --wait 60`); HCCL refuses an unfinished table.", "status")]


RULES: list[Callable[[RankTable], list[Problem]]] = [
    rule_servers_present, rule_server_count, rule_server_ids, rule_devices_present,
    rule_device_ids, rule_device_ips, rule_rank_ids, rule_rank_order, rule_status,
]


def validate(table: RankTable) -> list[Problem]:
    """Every rule in `RULES`; an empty list means HCCL will accept the table."""
    problems: list[Problem] = []
    for rule in RULES:
        problems.extend(rule(table))
    return problems


# ---- the environment against the table --------------------------------------------------

ENV_INTS = ("RANK_SIZE", "RANK_START", "RANK_ID", "DEVICE_ID")


def _env_ints(environ: dict[str, str], problems: list[Problem]) -> dict[str, int]:
    values = {}
    for name in ENV_INTS:
        raw = environ.get(name)
        if raw is None or raw == "":
            continue
        value = whole_number(raw)
        if value is not None:
            values[name] = value
        else:
            problems.append(Problem("RT_ENV_NOT_INTEGER", f"{name}={raw[:40]!r} is not a "
                                    "non-negative whole number (at most 18 digits).", name))
    return values


def _starts(table: RankTable) -> str:
    return ", ".join(f"{s.first_rank} (server {s.server_id})" for s in table.servers if s.devices)


def check_environment(table: RankTable, environ: dict[str, str]) -> list[Problem]:
    """RANK_ID / RANK_START / RANK_SIZE / DEVICE_ID in `environ` consistent with the table."""
    problems: list[Problem] = []
    env = _env_ints(environ, problems)
    visible = environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if "RANK_SIZE" in env and env["RANK_SIZE"] != table.rank_size:
        problems.append(Problem("RT_ENV_RANK_SIZE", f"RANK_SIZE={env['RANK_SIZE']} but the rank "
                                f"table has {table.rank_size} devices on {len(table.servers)} "
                                f"server(s); unset RANK_SIZE (it is derived from the table) or "
                                f"set it to {table.rank_size}.", "RANK_SIZE"))
    server = None
    if "RANK_START" in env:
        server = next((s for s in table.servers if s.devices
                       and s.first_rank == env["RANK_START"]), None)
        if server is None:
            problems.append(Problem("RT_ENV_RANK_START", f"RANK_START={env['RANK_START']} is not "
                                    "the first rank of any server; valid values: "
                                    f"{_starts(table)}.", "RANK_START"))
    if "RANK_ID" in env:
        rank = env["RANK_ID"]
        located = next(((s, d) for s in table.servers for d in s.devices if d.rank_id == rank),
                       None)
        if located is None:
            problems.append(unknown_rank_problem(table, rank, "RANK_ID"))
        elif server is not None and located[0] is not server:
            problems.append(Problem("RT_ENV_RANK_ID_SERVER", f"RANK_ID={rank} belongs to server "
                                    f"{located[0].server_id}, but RANK_START={env['RANK_START']} "
                                    f"selects server {server.server_id} (ranks "
                                    f"{describe_ranges(list(server.rank_ids))}); pick a rank of "
                                    "this server.", "RANK_ID"))
        elif "DEVICE_ID" in env:
            problems.extend(_device_matches(located[1].device_id, rank, env["DEVICE_ID"],
                                            visible))
    return problems


def _device_matches(physical: int, rank: int, device_id: int, visible: str | None) -> list[Problem]:
    try:
        expected = runtime_device_id(physical, visible)
    except RankTableError as exc:
        return exc.problems
    if device_id == expected:
        return []
    via = (f" (physical device {physical} is number {expected} in "
           f"ASCEND_RT_VISIBLE_DEVICES={visible})" if visible and expected != physical else "")
    return [Problem("RT_ENV_DEVICE_ID", f"DEVICE_ID={device_id} but rank {rank} runs on device "
                    f"{expected}{via} in this table; unset DEVICE_ID (the plugin derives it) or "
                    f"set DEVICE_ID={expected}.", "DEVICE_ID")]
