"""Platform variables for a mode, with the source of each.

Starts nothing and writes nothing; it reads os.environ (or a given mapping), the .env file,
the rank table file and (to find this server in a table) this host's addresses.

Who owns what (see docs/ranktables-and-variables.md for the full matrix):
- "platform" is the process environment the platform started us with (os.environ);
- the user speaks through `flags` (command-line options) and the `.env` file;
- "derived" values come from the rank table, "default" ones from this module.
A `.env` never overrides the platform. In a full run a user value that differs from a
platform value is a ConfigError naming both; in debug it is a warning and the platform wins.
With a rank table, this server's entry, RANK_SIZE and the debug rank's device come from it, each
checked against what the platform, the flags and the .env say.
"""
from __future__ import annotations

import dataclasses
import os

from platform_plugin.errors import ConfigError, Problem, errors_only
from platform_plugin.ranktable import (RankTable, RankTableError, Server, check_environment,
                                       load, parse_visible_devices, select_server)
from platform_plugin.util.envfile import read_env_files
from platform_plugin.util.numbers import whole_number
from platform_plugin.variables import PLATFORM_RUN_MODE

MODES = PLATFORM_RUN_MODE.choices
# The variables this module resolves itself; every other .env key passes through untouched.
PLATFORM_VARS = ("RANK_TABLE_FILE", "RANK_START", "RANK_ID", "DEVICE_ID", "RANK_SIZE")
MANAGED_VARS = PLATFORM_VARS + (PLATFORM_RUN_MODE.name,)
VISIBLE_DEVICES = "ASCEND_RT_VISIBLE_DEVICES"
SOURCE_LABELS = {"platform": "the platform (process environment)", "flag": "the command line",
                 ".env": ".env"}
AUTO_RULE_FULL = "auto: the platform set RANK_START (full runs only) and no RANK_ID"
AUTO_RULE_DEBUG = "auto: the platform set no RANK_START (or set RANK_ID): debug"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One resolved variable and where its value came from (a row of `platform-run env`).
    `source`: "platform" | ".env" | "flag" | "derived" | "default" | "unset"."""

    name: str
    value: str | None
    source: str
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Settings:
    """The resolved platform settings of this server (mode, rank table, ranks, .env).

    mode_source: "flag" | "PLATFORM_RUN_MODE" | "auto: <rule>"; rank_table: parsed, validated;
    server: this server's entry in it; rank_id: the in-kernel rank (debug), None in a full run
    (per process); device_id: the runtime DEVICE_ID of rank_id (debug); user_env: the .env
    values that do not collide with the platform; table: the rows of `platform-run env`;
    problems: warnings that did not stop resolution; env_files: the .env files read, nearest
    first (util/envfile.py: the rule)."""

    mode: str
    mode_source: str
    rank_table_file: str | None
    rank_table: RankTable | None
    server: Server | None
    rank_start: int
    rank_id: int | None
    rank_size: int | None
    device_id: int | None
    user_env: dict[str, str]
    table: tuple[Setting, ...]
    problems: tuple[Problem, ...] = ()
    visible_devices: str | None = None
    env_files: tuple[str, ...] = ()

    def process_env(self) -> dict[str, str]:
        """Variables to add to a child's (kernel's, rank's) environment: .env values
        (platform wins) plus the resolved platform variables."""
        env = dict(self.user_env)
        env[PLATFORM_RUN_MODE.name] = self.mode
        env["RANK_START"] = str(self.rank_start)
        if self.rank_table_file:
            env["RANK_TABLE_FILE"] = self.rank_table_file
        if self.rank_size is not None:
            env["RANK_SIZE"] = str(self.rank_size)
        if self.visible_devices is not None:  # DEVICE_ID is an index into it: keep them together
            env[VISIBLE_DEVICES] = self.visible_devices
        if self.mode == "debug" and self.rank_id is not None:
            env["RANK_ID"] = str(self.rank_id)
        if self.mode == "debug" and self.device_id is not None:
            env["DEVICE_ID"] = str(self.device_id)
        return env

    def row(self, name: str) -> Setting:
        return next(s for s in self.table if s.name == name)


def normalize_flags(flags: dict[str, object] | None) -> dict[str, str]:
    """{"rank_start": 8, "--rank-table": "x"} -> {"RANK_START": "8", "RANK_TABLE_FILE": "x"}."""
    aliases = {"RANK_TABLE": "RANK_TABLE_FILE"}
    out = {}
    for key, value in (flags or {}).items():
        if value is None or value == "":
            continue
        name = key.strip().lstrip("-").replace("-", "_").upper()
        out[aliases.get(name, name)] = str(value)
    return out


def choose_mode(mode: str | None, environ: dict[str, str]) -> tuple[str, str]:
    if mode is not None:
        source, value = "flag", mode
    elif PLATFORM_RUN_MODE.is_set(environ):
        source, value = PLATFORM_RUN_MODE.name, PLATFORM_RUN_MODE.raw(environ)
    elif environ.get("RANK_START") and not environ.get("RANK_ID"):
        return "full", AUTO_RULE_FULL
    else:
        return "debug", AUTO_RULE_DEBUG
    value = value.strip().lower()
    if value not in MODES:
        raise ConfigError([Problem("ENV_MODE", f"mode {value!r} (from {source}) is not one of "
                                   f"{', '.join(MODES)}.", "PLATFORM_RUN_MODE")])
    return value, source


class _Resolver:
    """One resolution: candidates per variable, the rows, and the problems found on the way."""

    def __init__(self, mode: str, environ: dict, dotenv: dict, flags: dict) -> None:
        self.mode, self.environ, self.dotenv, self.flags = mode, environ, dotenv, flags
        self.problems: list[Problem] = []
        self.rows: dict[str, Setting] = {}

    def candidates(self, name: str) -> list[tuple[str, str]]:
        found = [("flag", self.flags.get(name)), ("platform", self.environ.get(name)),
                 (".env", self.dotenv.get(name))]
        return [(src, val) for src, val in found if val not in (None, "")]

    def conflict(self, name: str, winner: tuple[str, str], loser: tuple[str, str], *,
                 error: bool) -> None:
        (w_src, w_val), (l_src, l_val) = winner, loser
        w_label, l_label = SOURCE_LABELS[w_src], SOURCE_LABELS[l_src]
        if error:
            msg = (f"{name}={w_val!r} from {w_label} conflicts with {name}={l_val!r} from "
                   f"{l_label}; in a {self.mode} run {w_label} decides. Remove {name} from "
                   f"{l_label} (overriding platform variables breaks full runs).")
        else:
            msg = (f"{name}={w_val!r} from {w_label} is used; {name}={l_val!r} from {l_label} "
                   f"is ignored. Remove it from {l_label} to silence this.")
        self.problems.append(Problem("ENV_CONFLICT", msg, name, "error" if error else "warning"))

    def platform_owned(self, name: str) -> tuple[str, str] | None:
        """The platform's value wins; a differing flag is an error in every mode (an explicit
        command must not be silently ignored), a differing .env one only in a full run."""
        cands = self.candidates(name)
        platform = next((c for c in cands if c[0] == "platform"), None)
        if platform is None:
            return cands[0] if cands else None
        for other in cands:
            if other[0] != "platform" and other[1] != platform[1]:
                self.conflict(name, platform, other,
                              error=other[0] == "flag" or self.mode == "full")
        return platform

    def user_owned(self, name: str) -> tuple[str, str] | None:
        """Debug RANK_START / RANK_ID: flag > platform > .env; whatever loses is reported."""
        cands = self.candidates(name)
        if not cands:
            return None
        for other in cands[1:]:
            if other[1] != cands[0][1] and not (cands[0][0] == "flag" and other[0] == ".env"):
                self.conflict(name, cands[0], other, error=False)
        return cands[0]

    def integer(self, name: str, chosen: tuple[str, str] | None) -> int | None:
        if chosen is None:
            return None
        value = whole_number(chosen[1])
        if value is not None:
            return value
        self.problems.append(Problem("ENV_NOT_INTEGER", f"{name}={chosen[1][:40]!r} (from "
                                     f"{SOURCE_LABELS[chosen[0]]}) is not a non-negative whole "
                                     "number (at most 18 digits).", name))
        return None

    def row(self, name: str, value: object, source: str, note: str = "") -> None:
        self.rows[name] = Setting(name, None if value is None else str(value), source, note)

    def row_from(self, name: str, chosen: tuple[str, str] | None, note: str = "") -> None:
        self.row(name, chosen[1] if chosen else None, chosen[0] if chosen else "unset", note)

    def table_problems(self, problems: list[Problem], source: str) -> None:
        # check_environment says what is wrong; the user also needs to know where it was set
        for p in problems:
            label = SOURCE_LABELS.get(source, f"the {source} value")
            self.problems.append(Problem(p.code, f"{p.message} ({p.path} came from {label}.)",
                                         p.path, p.severity))


def resolve(mode: str | None = None, *, environ: dict[str, str] | None = None,
            env_file: str | None = None, flags: dict[str, object] | None = None,
            cwd: str | None = None, local_addresses: set[str] | None = None,
            wait_timeout: float | None = None) -> Settings:
    """Resolve every variable for `mode`. Raises ConfigError (codes ENV_*, RT_*) on conflicts.

    `local_addresses` (tests) replaces this host's addresses when choosing the server;
    `wait_timeout` waits that long for a rank table whose status is not yet "completed".
    """
    environ = dict(os.environ if environ is None else environ)
    cwd = cwd or os.getcwd()
    dotenv, env_paths = read_env_files(env_file, cwd, environ)
    mode, mode_source = choose_mode(mode, environ)
    r = _Resolver(mode, environ, dotenv, normalize_flags(flags))
    if "PLATFORM_RUN_MODE" in dotenv:
        r.problems.append(Problem("ENV_MODE_IN_DOTENV", "PLATFORM_RUN_MODE in .env is ignored: "
                                  "the .env travels with the code into full runs. Use --mode.",
                                  "PLATFORM_RUN_MODE", "warning"))
    r.row("PLATFORM_RUN_MODE", mode, "flag" if mode_source == "flag" else
          "platform" if mode_source == "PLATFORM_RUN_MODE" else "derived", mode_source)

    visible = r.platform_owned(VISIBLE_DEVICES)
    r.row_from(VISIBLE_DEVICES, visible, "" if visible else "all devices visible")
    visible_value = visible[1] if visible else None

    table_file = r.platform_owned("RANK_TABLE_FILE")
    table_path = os.path.join(cwd, table_file[1]) if table_file else None
    table = None
    if table_path:
        try:
            table = load(table_path, wait_timeout=wait_timeout)
        except RankTableError as exc:
            r.problems.extend(exc.problems)
    r.row_from("RANK_TABLE_FILE", table_file, "" if table_file else
               "no rank table: fine on CPU/GPU; the rank-table (HCCL) backend needs one")

    server, rank_start = _resolve_rank_start(r, table, local_addresses)
    rank_size = _resolve_rank_size(r, table)
    rank_id, device_id = _resolve_rank_and_device(r, table, server, rank_start, visible_value)
    if table is not None:  # without a table (a CPU box) the variable is not used
        _check_visible_format(r, visible_value)

    user_env = _user_env(r, dotenv, environ)
    errors = errors_only(r.problems)
    if errors:
        raise ConfigError(errors)
    order = ("PLATFORM_RUN_MODE", "RANK_TABLE_FILE", "RANK_START", "RANK_ID", "DEVICE_ID",
             "RANK_SIZE", VISIBLE_DEVICES)
    return Settings(mode, mode_source, table_path, table, server, rank_start, rank_id, rank_size,
                    device_id, user_env, tuple(r.rows[n] for n in order), tuple(r.problems),
                    visible_value, tuple(env_paths))


def _user_env(r: _Resolver, dotenv: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """.env values a child gets: not the resolved variables, never one the platform set."""
    user_env = {}
    for name, value in dotenv.items():
        if name in MANAGED_VARS or name == VISIBLE_DEVICES:
            continue
        if name in environ and environ[name] != value:
            r.conflict(name, ("platform", environ[name]), (".env", value), error=False)
            continue
        user_env[name] = value
    return user_env


def _resolve_rank_start(r: _Resolver, table: RankTable | None,
                        local_addresses: set[str] | None) -> tuple[Server | None, int]:
    """This server's entry (by RANK_START if given, else by this host's addresses)."""
    chosen = r.platform_owned("RANK_START") if r.mode == "full" else r.user_owned("RANK_START")
    value = r.integer("RANK_START", chosen)
    if table is None:
        r.row_from("RANK_START", chosen) if chosen else r.row("RANK_START", 0, "default")
        return None, value or 0
    try:
        server = select_server(table, rank_start=value, local_addresses=local_addresses)
    except RankTableError as exc:
        r.table_problems(exc.problems, chosen[0]) if chosen else r.problems.extend(exc.problems)
        r.row_from("RANK_START", chosen)
        return None, value or 0
    if chosen:
        r.row_from("RANK_START", chosen, f"server {server.server_id}")
    else:
        r.row("RANK_START", server.first_rank, "derived", f"first rank of server "
              f"{server.server_id}" + (" (this host)" if len(table.servers) > 1 else ""))
    return server, server.first_rank


def _resolve_rank_size(r: _Resolver, table: RankTable | None) -> int | None:
    """The table's RANK_SIZE; one set anywhere else must agree."""
    cands = r.candidates("RANK_SIZE")
    if table is None:
        chosen = cands[0] if cands else None
        r.row_from("RANK_SIZE", chosen, "no rank table: not checked" if chosen else "")
        return r.integer("RANK_SIZE", chosen)
    for source, value in cands:  # set anywhere and different from the table: an error
        if r.integer("RANK_SIZE", (source, value)) is not None:
            r.table_problems(check_environment(table, {"RANK_SIZE": value}), source)
    r.row("RANK_SIZE", table.rank_size, "derived", f"{len(table.servers)} server(s) in the table")
    return table.rank_size


def _resolve_rank_and_device(r: _Resolver, table: RankTable | None, server: Server | None,
                             rank_start: int, visible: str | None) -> tuple[int | None, int | None]:
    if r.mode == "full":
        for name in ("RANK_ID", "DEVICE_ID"):
            for source, value in r.candidates(name):
                r.problems.append(Problem("ENV_IGNORED", f"{name}={value!r} from "
                                          f"{SOURCE_LABELS[source]} is ignored in a full run: each process gets {name} from "
                                          "RANK_START + its local index.", name, "warning"))
            r.row(name, None, "derived", "per process: RANK_START + local index" if
                  name == "RANK_ID" else "per process: that rank's device in the table")
        return None, None
    chosen = r.user_owned("RANK_ID")
    rank_id = r.integer("RANK_ID", chosen)
    if table is None:
        device = r.user_owned("DEVICE_ID")
        r.row_from("RANK_ID", chosen)
        r.row_from("DEVICE_ID", device, "no rank table: not checked" if device else "")
        return rank_id, r.integer("DEVICE_ID", device)
    return _rank_and_device_from_table(r, table, server, rank_start, visible, chosen, rank_id)


def _rank_and_device_from_table(r: _Resolver, table: RankTable, server: Server | None,
                                rank_start: int, visible: str | None,
                                chosen: tuple[str, str] | None,
                                rank_id: int | None) -> tuple[int | None, int | None]:
    """Debug: the kernel's rank (RANK_ID, else this server's first) and its device."""
    if chosen is None and server is not None:
        rank_id = rank_start
        r.row("RANK_ID", rank_id, "default", "first rank of this server; set RANK_ID to change")
    else:
        r.row_from("RANK_ID", chosen)
    if rank_id is None:
        r.row("DEVICE_ID", None, "unset")
        return None, None
    env = {"RANK_ID": str(rank_id), "RANK_START": str(rank_start)} if server else \
        {"RANK_ID": str(rank_id)}
    rank_problems = check_environment(table, env)
    r.table_problems(rank_problems, chosen[0] if chosen else "default")
    if rank_problems:
        r.row("DEVICE_ID", None, "unset", "no valid RANK_ID")
        return rank_id, None
    try:
        device_id = table.device_id_for_rank(rank_id, visible)
    except RankTableError as exc:
        r.problems.extend(exc.problems)
        r.row("DEVICE_ID", None, "unset")
        return rank_id, None
    for source, value in r.candidates("DEVICE_ID"):  # a set DEVICE_ID must agree
        if r.integer("DEVICE_ID", (source, value)) is not None:
            r.table_problems(check_environment(table, {
                "RANK_ID": str(rank_id), "DEVICE_ID": value, VISIBLE_DEVICES: visible or ""}),
                source)
    _server, device = table.device_for_rank(rank_id)
    via = f" via {VISIBLE_DEVICES}" if visible and device.device_id != device_id else ""
    r.row("DEVICE_ID", device_id, "derived", f"rank {rank_id} is physical device "
          f"{device.device_id}{via}")
    return rank_id, device_id


def _check_visible_format(r: _Resolver, visible: str | None) -> None:
    """ASCEND_RT_VISIBLE_DEVICES must be a list of numbers whatever the mode (with a table):
    `env` and `doctor --mode full` say so rather than the launch refusing it later."""
    if not visible or any(p.code == "RT_VISIBLE_DEVICES" for p in r.problems):
        return
    try:
        parse_visible_devices(visible)
    except RankTableError as exc:
        r.problems.extend(exc.problems)
