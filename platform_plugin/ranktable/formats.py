"""Read the rank-table formats found in the wild into one `RankTable`, and write HCCL "1.0".

Formats (a registry, tried in order, first `detect` that matches reads the document):
- "1.0": `server_list[].device[]` — what hccl_tools.py writes and MindSpore documents.
- "group_list": the older ModelArts/job format `group_list[].instance_list[].devices[]`
  (one instance per server, no rank ids): converted, ranks numbered by pod index.
- "board": the pre-1.0 board format (`board_id`, `para_plane_nic_*`, one instance per rank):
  read so it can be shown, but reported as an error with how to regenerate it.

Readers never raise on bad input: every finding is a `Problem` with a JSON path.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from platform_plugin.errors import Problem
from platform_plugin.ranktable.model import Device, RankTable, Server
from platform_plugin.util.numbers import MAX_DIGITS, too_long, whole_number

SUPPORTED_VERSIONS = ("1.0", "1.1", "1.2")
MISSING = object()


class _Reader:
    """Typed field access that records problems instead of raising."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.unusable = False  # a value the table cannot be built without is broken

    def add(self, code: str, message: str, path: str, severity: str = "error") -> None:
        self.problems.append(Problem(code, message, path, severity))

    def obj(self, value: Any, path: str) -> dict | None:
        if isinstance(value, dict):
            return value
        self.add("RT_WRONG_TYPE", f"expected a JSON object, found {_kind(value)}.", path)
        self.unusable = True
        return None

    def array(self, value: Any, path: str) -> list | None:
        if isinstance(value, list):
            return value
        if value is MISSING:
            self.add("RT_MISSING_FIELD", "required list is missing.", path)
        else:
            self.add("RT_WRONG_TYPE", f"expected a JSON list, found {_kind(value)}.", path)
        self.unusable = True
        return None

    def string(self, mapping: dict, key: str, path: str, *, required: bool = True) -> str | None:
        value = mapping.get(key, MISSING)
        if value is MISSING or value is None:
            if required:
                self.add("RT_MISSING_FIELD", f"required field {key!r} is missing.", path)
            return None
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # HCCL's parser reads every field as a JSON string and rejects numbers
            self.add("RT_NOT_STRING", f"{key} must be a JSON string: write \"{value}\", not "
                     f"{value}.", path)
            return str(value)
        self.add("RT_WRONG_TYPE", f"{key} must be a JSON string, found {_kind(value)}.", path)
        return None

    def integer(self, mapping: dict, key: str, path: str, *, needed: bool = True) -> int | None:
        """A whole number in a string; `needed`: the table cannot be built without it."""
        text = self.string(mapping, key, path)
        if text is None:
            self.unusable = self.unusable or needed
            return None
        value = whole_number(text)
        if value is None:
            shown = f"{len(text.strip())} digits" if too_long(text) else repr(text.strip()[:40])
            self.add("RT_NOT_INTEGER", f"{key} must be a non-negative whole number in a string "
                     f"(e.g. \"0\", at most {MAX_DIGITS} digits), found {shown}.", path)
            self.unusable = self.unusable or needed
            return None
        return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def _devices(reader: _Reader, raw: Any, path: str, *, with_rank: bool) -> list[Device]:
    devices = []
    for i, item in enumerate(reader.array(raw, path) or []):
        where = f"{path}[{i}]"
        entry = reader.obj(item, where)
        if entry is None:
            continue
        device_id = reader.integer(entry, "device_id", f"{where}.device_id")
        rank_id = reader.integer(entry, "rank_id", f"{where}.rank_id") if with_rank else -1
        device_ip = reader.string(entry, "device_ip", f"{where}.device_ip", required=False)
        if device_id is not None and rank_id is not None:
            devices.append(Device(device_id, rank_id, device_ip))
    return devices


# ---- "1.0" -------------------------------------------------------------------------------

def _is_v1(doc: dict) -> bool:
    return "server_list" in doc


def _read_v1(doc: dict, reader: _Reader) -> RankTable | None:
    version = reader.string(doc, "version", "version") or ""
    if version and version not in SUPPORTED_VERSIONS:
        reader.add("RT_VERSION", f"version {version!r} is not an HCCL rank-table version this "
                   f"plugin knows ({', '.join(SUPPORTED_VERSIONS)}); regenerate the table with "
                   "`platform-run ranktable generate`.", "version")
    status = reader.string(doc, "status", "status") or ""
    server_count = reader.integer(doc, "server_count", "server_count", needed=False)
    servers = []
    for i, item in enumerate(reader.array(doc.get("server_list", MISSING), "server_list") or []):
        where = f"server_list[{i}]"
        entry = reader.obj(item, where)
        if entry is None:
            continue
        server_id = reader.string(entry, "server_id", f"{where}.server_id") or ""
        devices = _devices(reader, entry.get("device", MISSING), f"{where}.device", with_rank=True)
        servers.append(Server(server_id, tuple(devices)))
    return RankTable(version or "1.0", tuple(servers), status, declared_server_count=server_count)


# ---- "group_list" (older job format, one instance per server) --------------------------

def _is_group_list(doc: dict) -> bool:
    return "group_list" in doc and not _is_board(doc)


def _pod_index(instance: dict) -> int | None:
    match = re.search(r"(\d+)$", str(instance.get("pod_name", "")))
    return whole_number(match.group(1)) if match else None


def _read_group_list(doc: dict, reader: _Reader) -> RankTable | None:
    groups = reader.array(doc.get("group_list"), "group_list") or []
    if len(groups) != 1:
        reader.add("RT_GROUP_COUNT", f"a group_list table must hold exactly one group, found "
                   f"{len(groups)}; regenerate a 1.0 table for the job.", "group_list")
        reader.unusable = True
        return None
    group = reader.obj(groups[0], "group_list[0]")
    path = "group_list[0].instance_list"
    instances = reader.array(group.get("instance_list", MISSING), path) if group else None
    if not instances:
        return None
    order = list(range(len(instances)))
    found = [_pod_index(x) if isinstance(x, dict) else None for x in instances]
    indexes = [i for i in found if i is not None]
    # The job's pods are numbered (...-pod-0, ...-pod-1): pod i is node i, so its devices take
    # ranks 8i..; the file lists pods in arbitrary order. Without pod numbers keep file order.
    if len(indexes) == len(found) and len(set(indexes)) == len(indexes):
        order.sort(key=lambda k: indexes[k])
    servers, next_rank = [], 0
    for k in order:
        where = f"{path}[{k}]"
        entry = reader.obj(instances[k], where)
        if entry is None:
            continue
        server_id = reader.string(entry, "server_id", f"{where}.server_id") or ""
        devices = []
        for dev in _devices(reader, entry.get("devices", MISSING), f"{where}.devices",
                            with_rank=False):
            devices.append(Device(dev.device_id, next_rank, dev.device_ip))
            next_rank += 1
        servers.append(Server(server_id, tuple(devices)))
    status = reader.string(doc, "status", "status") or ""
    reader.add("RT_CONVERTED", "older group_list format converted to HCCL 1.0 (servers ordered "
               "by pod number, ranks numbered in that order). MindSpore reads only 1.0: write "
               "the converted table with `platform-run ranktable show FILE --json -o new.json` "
               "and point RANK_TABLE_FILE at it.", "group_list", "warning")
    return RankTable("1.0", tuple(servers), status, converted_from="group_list",
                     declared_server_count=len(servers))


# ---- pre-1.0 board format --------------------------------------------------------------

BOARD_MARKERS = ("board_id", "chip_info", "deploy_mode", "para_plane_nic_location")


def _is_board(doc: dict) -> bool:
    return any(k in doc for k in BOARD_MARKERS)


def _read_board(doc: dict, reader: _Reader) -> RankTable | None:
    groups = reader.array(doc.get("group_list", MISSING), "group_list") or []
    by_server: dict[str, list[Device]] = {}
    for g, group in enumerate(groups):
        entry = reader.obj(group, f"group_list[{g}]")
        path = f"group_list[{g}].instance_list"
        for i, inst in enumerate((reader.array(entry.get("instance_list", MISSING), path)
                                  if entry else None) or []):
            where = f"{path}[{i}]"
            inst = reader.obj(inst, where)
            if inst is None:
                continue
            rank_id = reader.integer(inst, "rank_id", f"{where}.rank_id")
            server_id = reader.string(inst, "server_id", f"{where}.server_id") or ""
            for dev in _devices(reader, inst.get("devices", MISSING), f"{where}.devices",
                                with_rank=False):
                if rank_id is not None:
                    by_server.setdefault(server_id, []).append(
                        Device(dev.device_id, rank_id, dev.device_ip))
    reader.add("RT_LEGACY_FORMAT", "this is the pre-1.0 board format (board_id, "
               "para_plane_nic_*, group_list), which MindSpore 2.x/HCCL 1.0 rank-table startup "
               "does not read. Regenerate the table on each server with `platform-run ranktable "
               "generate --devices 0-7 -o hccl.json` (device IPs from /etc/hccn.conf) and join "
               "servers with `platform-run ranktable merge`, or print this table converted to "
               "1.0 with `platform-run ranktable show FILE --json`.", "board_id")
    servers = tuple(Server(sid, tuple(devs)) for sid, devs in by_server.items())
    status = reader.string(doc, "status", "status") or ""
    return RankTable("1.0", servers, status, converted_from="board",
                     declared_server_count=len(servers))


FORMATS: list[tuple[str, Callable[[dict], bool], Callable[[dict, _Reader], RankTable | None]]] = [
    ("1.0", _is_v1, _read_v1),
    ("board", _is_board, _read_board),
    ("group_list", _is_group_list, _read_group_list),
]


def read_document(doc: Any) -> tuple[RankTable | None, list[Problem]]:
    """A decoded JSON document -> (table or None when it cannot be built, problems)."""
    reader = _Reader()
    if not isinstance(doc, dict):
        reader.add("RT_NOT_OBJECT", f"a rank table is a JSON object, found {_kind(doc)}.", "")
        return None, reader.problems
    for _name, detect, read in FORMATS:
        if detect(doc):
            table = read(doc, reader)
            return (None if reader.unusable else table), reader.problems
    reader.add("RT_UNKNOWN_FORMAT", "not a rank table: expected `server_list` (HCCL 1.0) or "
               "`group_list` (older formats). Generate one with `platform-run ranktable "
               "generate`.", "")
    return None, reader.problems


def to_hccl_dict(table: RankTable) -> dict:
    """The table as HCCL "1.0" JSON, laid out exactly like hccl_tools.py output (all strings)."""
    return {
        "version": "1.0",
        "server_count": str(len(table.servers)),
        "server_list": [
            {
                "server_id": server.server_id,
                "device": [_device_dict(d) for d in server.devices],
                "host_nic_ip": "reserve",
            }
            for server in table.servers
        ],
        "status": table.status,
    }


def _device_dict(device: Device) -> dict:
    entry = {"device_id": str(device.device_id)}
    if device.device_ip is not None:  # optional on a single server: keep it absent, not ""
        entry["device_ip"] = device.device_ip
    entry["rank_id"] = str(device.rank_id)
    return entry
