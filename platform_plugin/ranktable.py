"""HCCL rank tables: parse, validate, choose this server.  (CONTRACT — foundation issue #2 implements.)

Pure: no subprocess, no I/O beyond reading the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError, Problem


class RankTableError(ConfigError):
    """The table cannot be used; `.problems` lists every finding (codes RT_*)."""


@dataclass(frozen=True)
class Device:
    device_id: int  # physical NPU id on its server (what DEVICE_ID must be)
    rank_id: int  # global rank
    device_ip: str | None = None


@dataclass(frozen=True)
class Server:
    server_id: str  # usually the host IP
    devices: tuple[Device, ...]

    @property
    def first_rank(self) -> int:
        return min(d.rank_id for d in self.devices)


@dataclass(frozen=True)
class RankTable:
    version: str  # "1.0" (older formats are converted on load)
    servers: tuple[Server, ...]
    status: str = "completed"
    path: str | None = None  # file it came from
    converted_from: str | None = None  # "group_list" when converted

    @property
    def rank_size(self) -> int:
        return sum(len(s.devices) for s in self.servers)

    def device_for_rank(self, rank_id: int) -> tuple[Server, Device]:
        ...


def parse(data: dict | str, *, path: str | None = None) -> tuple[RankTable | None, list[Problem]]:
    """Parse a decoded or raw JSON table. Never raises on bad input: returns (table|None, problems)."""
    ...


def load(path: str) -> RankTable:
    """Read + parse + validate; raises RankTableError listing every error-level problem."""
    ...


def validate(table: RankTable) -> list[Problem]:
    ...


def check_environment(table: RankTable, environ: dict[str, str]) -> list[Problem]:
    """RANK_ID / RANK_START / RANK_SIZE / DEVICE_ID in `environ` consistent with the table."""
    ...


def select_server(table: RankTable, *, rank_start: int | None = None,
                  local_addresses: set[str] | None = None) -> Server:
    """This server: by RANK_START, else server_id among local addresses, else the only server;
    raises RankTableError for an ambiguous multi-server table (never silently server 0)."""
    ...
