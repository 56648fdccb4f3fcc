"""Make rank tables: `generate` (the hccl_tools.py job) and `merge` (the merge_hccl.py job).

Both return the HCCL "1.0" document laid out exactly as MindSpore's utils/hccl_tools scripts
write it — every value a JSON string, `host_nic_ip` "reserve", status "completed" — and both
validate what they produce, so a table they hand out is one `ranktable check` accepts.

Differences from the original scripts, on purpose:
- device IPs come from hccn.conf only (`hccn_tool` needs a subprocess and an NPU driver);
- `--devices` takes "0-7", "[0,8)" or "0,1,2,3" and up to 16 cards: hccl_tools reads the
  characters at positions 1 and 3 of "[0,16)", so it silently makes a 1-card table;
- merge refuses inputs that are not "completed" and a result HCCL would reject
  (duplicate server_id or device_ip), instead of writing it.
"""
from __future__ import annotations

import ipaddress
import re
import socket

from platform_plugin.errors import Problem, errors_only
from platform_plugin.ranktable import (Device, RankTable, RankTableError, Server, parse_file,
    parse_visible_devices, to_hccl_dict, validate)
from platform_plugin.ranktable.rules import MAX_DEVICES_PER_SERVER
from platform_plugin.util.hosts import is_host
from platform_plugin.util.regular_file import read_regular_file

DEFAULT_HCCN_CONF = "/etc/hccn.conf"
_ADDRESS = re.compile(r"^\s*address_(\d{1,6})\s*=\s*(\S+)\s*$")


def parse_hccn_conf(text: str, *, path: str = DEFAULT_HCCN_CONF) -> dict[int, str]:
    """`address_N=IP` lines -> {N: IP} (netmask, gateway and other lines are not needed)."""
    addresses, problems = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        match = _ADDRESS.match(line)
        if not match:
            continue
        device, ip = int(match.group(1)), match.group(2)
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            problems.append(Problem("RT_HCCN_ADDRESS", f"{path} line {number}: {ip!r} is not an "
                                    "IP address.", f"{path}:{number}"))
            continue
        addresses[device] = ip
    if problems:
        raise RankTableError(problems)
    return addresses


# hccn.conf is a few lines a card; a bound keeps /dev/zero or a FIFO from hanging `generate`
MAX_HCCN_CONF_BYTES = 1 << 20


def read_hccn_conf(path: str = DEFAULT_HCCN_CONF) -> dict[int, str]:
    try:
        text = read_regular_file(path, MAX_HCCN_CONF_BYTES).decode("utf-8", errors="replace")
    except (OSError, ValueError) as exc:  # not found, not a regular file, too large, a NUL
        raise RankTableError(f"cannot read {path} ({getattr(exc, 'strerror', None) or exc}): "
                             "it holds the NPU NIC addresses (address_N=IP); pass --hccn-conf "
                             "FILE on a machine without it.", code="RT_HCCN_MISSING") from None
    return parse_hccn_conf(text, path=path)


def parse_devices(spec: str) -> list[int]:
    """"0-7" | "[0,8)" | "[0,7]" | "0,1,2,3" | "5" -> sorted unique device numbers."""
    text = spec.strip()
    interval = re.fullmatch(r"([\[(])\s*(\d{1,6})\s*,\s*(\d{1,6})\s*([\])])", text)
    dash = re.fullmatch(r"(\d{1,6})\s*-\s*(\d{1,6})", text)
    if interval:
        low = int(interval.group(2)) + (interval.group(1) == "(")
        high = int(interval.group(3)) + (interval.group(4) == "]")
        values = list(range(low, high))
    elif dash:
        values = list(range(int(dash.group(1)), int(dash.group(2)) + 1))
    elif re.fullmatch(r"\d{1,6}(\s*,\s*\d{1,6}){0,63}", text):
        values = sorted({int(v) for v in text.split(",")})
    else:
        raise RankTableError(f"--devices {spec!r}: write a range like 0-7 or [0,8), or a list "
                             "like 0,1,2,3.", code="RT_DEVICES_SPEC")
    if not values:
        raise RankTableError(f"--devices {spec!r} selects no device.", code="RT_DEVICES_SPEC")
    if len(values) > MAX_DEVICES_PER_SERVER or values[-1] >= MAX_DEVICES_PER_SERVER:
        raise RankTableError(f"--devices {spec!r}: a server has at most "
                             f"{MAX_DEVICES_PER_SERVER} NPUs, numbered 0-"
                             f"{MAX_DEVICES_PER_SERVER - 1}.", code="RT_DEVICES_SPEC")
    return values


def default_server_ip() -> str:
    """What hccl_tools does: the address the hostname resolves to."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        raise RankTableError("cannot resolve this host's IP address: pass --server-ip.",
                             code="RT_SERVER_IP") from None


def generate(*, devices: str = "0-7", hccn_conf: str = DEFAULT_HCCN_CONF,
             server_ip: str | None = None, visible_devices: str | None = None
             ) -> tuple[dict, list[Problem]]:
    """One server's table. Returns (HCCL 1.0 dict, warnings).

    As in hccl_tools, `devices` are numbers as the software sees them: with
    `visible_devices` "4,5,6,7", devices "0-3" are the physical cards 4-7 (and their
    physical ids go into the table). Without it they are physical ids.
    """
    logical = parse_devices(devices)
    visible = parse_visible_devices(visible_devices)
    if visible is not None:
        if logical[-1] >= len(visible):
            raise RankTableError(f"--devices {devices!r} reaches past the {len(visible)} visible "
                                 f"devices ({visible_devices}); number them 0-{len(visible) - 1}.",
                                 code="RT_DEVICES_SPEC")
        physical = [visible[i] for i in logical]
    else:
        physical = logical
    addresses = read_hccn_conf(hccn_conf)
    missing = [d for d in physical if d not in addresses]
    if missing:
        raise RankTableError(f"{hccn_conf} has no address_N line for device(s) "
                             f"{', '.join(map(str, missing))}: configure their NIC with hccn_tool "
                             "or choose other --devices.", code="RT_HCCN_DEVICE")
    server_id = server_ip or default_server_ip()
    if not is_host(server_id):  # it becomes PLATFORM_SERVER_ID, folder names and tags
        raise RankTableError(f"--server-ip {server_id[:80]!r} is neither an IP address nor a "
                             "host name.", code="RT_SERVER_ID_INVALID")
    warnings = _group_warnings(physical)
    if server_id.startswith("127."):
        warnings.append(Problem("RT_SERVER_LOOPBACK", f"server_id {server_id} is a loopback "
                                "address: fine for one server, but other servers cannot reach "
                                "it; pass --server-ip with the host's real IP.", "server_id",
                                "warning"))
    server = Server(server_id, tuple(Device(d, rank, addresses[d])
                                     for rank, d in enumerate(physical)))
    table = RankTable("1.0", (server,), "completed", declared_server_count=1)
    _check_result(table)
    return to_hccl_dict(table), warnings


def _group_warnings(physical: list[int]) -> list[Problem]:
    # On 8-NPU 910 servers cards 0-3 and 4-7 form two HCCS rings; hccl_tools refuses a subset
    # that crosses them (e.g. [3,6)). 16-NPU servers differ, so this is a warning only.
    if len(physical) < 8 and max(physical) < 8 and min(physical) < 4 <= max(physical):
        return [Problem("RT_CROSS_GROUP", f"devices {physical} cross the 0-3 / 4-7 groups: on "
                        "an 8-NPU Ascend 910 server HCCL only accepts such a subset as all 8 "
                        "cards; use 0-3, 4-7 or 0-7.", "device", "warning")]
    return []


def merge(paths: list[str]) -> dict:
    """merge_hccl.py: servers in the order of `paths`, ranks renumbered 0..N-1 in that order."""
    if not paths:
        raise RankTableError("merge needs at least one rank table.", code="RT_MERGE_EMPTY")
    servers: list[Server] = []
    problems: list[Problem] = []
    rank = 0
    for path in paths:
        table, found = parse_file(path)
        # rank numbering problems in the inputs do not matter: merge renumbers every rank
        found = [p for p in errors_only(found) if not p.code.startswith("RT_RANK")]
        if table is not None and table.status != "completed":
            found.append(Problem("RT_STATUS", f"status is {table.status!r}: merge only finished "
                                 "tables.", "status"))
        if table is None or found:
            problems.extend(Problem(p.code, f"{path}: {p.message}", p.path) for p in found)
            continue
        for server in table.servers:
            devices = []
            for device in server.devices:
                devices.append(Device(device.device_id, rank, device.device_ip))
                rank += 1
            servers.append(Server(server.server_id, tuple(devices)))
    if problems:
        raise RankTableError(problems)
    merged = RankTable("1.0", tuple(servers), "completed", declared_server_count=len(servers))
    _check_result(merged)
    return to_hccl_dict(merged)


def default_file_name(doc: dict) -> str:
    """The names hccl_tools.py / merge_hccl.py give their output."""
    servers = doc["server_list"]
    devices = [d for s in servers for d in s["device"]]
    if len(servers) == 1:
        ids = "".join(d["device_id"] for d in devices)
        return f"hccl_{len(devices)}p_{ids}_{servers[0]['server_id']}.json"
    return f"hccl_{len(servers)}s_{len(devices)}p.json"


def _check_result(table: RankTable) -> None:
    errors = errors_only(validate(table))
    if errors:
        raise RankTableError(errors)
