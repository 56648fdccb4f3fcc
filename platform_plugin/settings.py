"""Platform variables for a mode, with the source of each.  (CONTRACT — foundation issue #2 implements.)

Pure: reads os.environ (or a given mapping), the .env file, and the rank table file.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import Problem
from .ranktable import RankTable, Server

MODES = ("debug", "full")


@dataclass(frozen=True)
class Setting:
    name: str
    value: str | None
    source: str  # "platform" | ".env" | "flag" | "derived" | "default" | "unset"
    note: str = ""


@dataclass(frozen=True)
class Settings:
    mode: str  # "debug" | "full"
    mode_source: str  # "flag" | "PLATFORM_RUN_MODE" | "auto: <rule>"
    rank_table_file: str | None
    rank_table: RankTable | None  # parsed + validated when a file is resolved
    server: Server | None  # this server's entry in the table
    rank_start: int
    rank_id: int | None  # debug mode: the in-kernel rank; full: None (derived per process)
    rank_size: int | None  # from the table; None without a table
    device_id: int | None  # physical device of rank_id (debug), None otherwise
    user_env: dict[str, str]  # every .env value that does not collide with the platform
    table: tuple[Setting, ...]  # rows for `platform-run env`
    problems: tuple[Problem, ...] = ()  # warnings that did not stop resolution

    def process_env(self) -> dict[str, str]:
        """Variables to add to a child's (kernel's, rank's) environment: .env values
        (platform wins) plus the resolved platform variables."""
        ...


def resolve(mode: str | None = None, *, environ: dict[str, str] | None = None,
            env_file: str | None = None, flags: dict[str, str] | None = None,
            cwd: str | None = None) -> Settings:
    """Resolve every variable for `mode`. Raises ConfigError (codes ENV_*) on conflicts."""
    ...
