"""The rank-table value types and the DEVICE_ID arithmetic.

Kept apart from parsing (`formats`) and the rules (`rules`) so every one
of them can import the types without a cycle; `ranktable` re-exports everything public.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.numbers import whole_number


class RankTableError(ConfigError):
    """The table cannot be used; `.problems` lists every finding (codes RT_*)."""

    def __init__(self, problems: list[Problem] | str, *, code: str = "RT_INVALID"):
        super().__init__(problems, code=code)


@dataclass(frozen=True)
class Device:
    device_id: int  # physical NPU id on its server (what DEVICE_ID must be)
    rank_id: int  # global rank
    device_ip: str | None = None


@dataclass(frozen=True)
class Server:
    server_id: str  # usually the host IP
    devices: tuple[Device, ...]

    # cached: `ranktable show` asks once per device row (quadratic on a 100,000-device table)
    @cached_property
    def first_rank(self) -> int:
        return min(d.rank_id for d in self.devices)

    @cached_property
    def rank_ids(self) -> tuple[int, ...]:
        return tuple(sorted(d.rank_id for d in self.devices))


@dataclass(frozen=True)
class RankTable:
    version: str  # "1.0" (older formats are converted on load)
    servers: tuple[Server, ...]
    status: str = "completed"
    path: str | None = None  # file it came from
    converted_from: str | None = None  # "group_list" | "board" when converted
    declared_server_count: int | None = None  # the file's `server_count` (checked by validate)

    @property
    def rank_size(self) -> int:
        return sum(len(s.devices) for s in self.servers)

    def device_for_rank(self, rank_id: int) -> tuple[Server, Device]:
        for server in self.servers:
            for device in server.devices:
                if device.rank_id == rank_id:
                    return server, device
        raise RankTableError([unknown_rank_problem(self, rank_id, "RANK_ID")])

    def device_id_for_rank(self, rank_id: int, visible_devices: str | None = None) -> int:
        """The DEVICE_ID a process of `rank_id` must get (see `runtime_device_id`)."""
        _server, device = self.device_for_rank(rank_id)
        return runtime_device_id(device.device_id, visible_devices)


def parse_visible_devices(visible_devices: str | None) -> list[int] | None:
    """ASCEND_RT_VISIBLE_DEVICES ("4,5,6,7") as a list of physical ids; None when unset/empty."""
    if visible_devices is None or not visible_devices.strip():
        return None
    ids = []
    for item in visible_devices.split(","):
        number = whole_number(item.strip())
        if number is None:
            raise RankTableError([Problem(
                "RT_VISIBLE_DEVICES", f"ASCEND_RT_VISIBLE_DEVICES={visible_devices!r} is not a "
                "comma-separated list of device numbers such as \"4,5,6,7\"; fix or unset it.",
                "ASCEND_RT_VISIBLE_DEVICES")])
        ids.append(number)
    return ids


def runtime_device_id(physical_id: int, visible_devices: str | None) -> int:
    """The id the Ascend runtime knows a physical NPU by.

    With ASCEND_RT_VISIBLE_DEVICES="4,5,6,7" the runtime renumbers the visible cards 0..3, so
    physical device 6 must be addressed as DEVICE_ID=2; a card outside the list cannot be used.
    """
    visible = parse_visible_devices(visible_devices)
    if visible is None:
        return physical_id
    if physical_id not in visible:
        raise RankTableError([Problem(
            "RT_DEVICE_NOT_VISIBLE",
            f"the rank table puts this rank on physical device {physical_id}, but "
            f"ASCEND_RT_VISIBLE_DEVICES={visible_devices!r} hides it from the runtime. Add "
            f"{physical_id} to ASCEND_RT_VISIBLE_DEVICES or unset it.",
            "ASCEND_RT_VISIBLE_DEVICES")])
    return visible.index(physical_id)


def describe_ranges(values: list[int]) -> str:
    """[0,1,2,3,8] -> "0-3, 8": how valid ids are listed in messages."""
    values = sorted(set(values))
    runs: list[list[int]] = []  # [first, last] of each run of consecutive ids
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(f"{first}-{last}" if last != first else f"{first}"
                     for first, last in runs) or "none"


def unknown_rank_problem(table: RankTable, rank_id: int, variable: str,
                         server: Server | None = None) -> Problem:
    """The seed error, said so a user can act on it.

    HCCL reports "Invalid ranktable, with rank_id [4] and local device_id [4]" when RANK_ID=4 is
    used on a 4-card table whose devices are 4-7 (ranks 0-3): a device id was taken for a rank
    id. Name the valid ranks, spot that confusion, and say what to set instead.
    """
    servers = (server,) if server else table.servers
    valid = [d.rank_id for s in servers for d in s.devices]
    where = f"on server {server.server_id}" if server else "in this rank table"
    msg = (f"{variable}={rank_id} is not a rank {where}: valid rank_ids are "
           f"{describe_ranges(valid)}.")
    same_device = [(s, d) for s in servers for d in s.devices if d.device_id == rank_id]
    if same_device:
        _s, dev = same_device[0]
        msg += (f" {rank_id} looks like a device_id: physical device {rank_id} has rank_id "
                f"{dev.rank_id} here. To use that card set {variable}={dev.rank_id}, and leave "
                "DEVICE_ID unset: the plugin derives it from the table.")
    else:
        msg += f" Set {variable} to one of {describe_ranges(valid)}."
    return Problem("RT_ENV_RANK_ID", msg, variable)
