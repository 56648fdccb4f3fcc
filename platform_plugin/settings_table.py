"""The part of settings resolution that only a job with a rank table runs (settings.py imports
it when a table was found; a launch without one does not compile it): this server in the table,
RANK_SIZE from it, the debug rank's device, each checked against what the platform, the flags
and the .env say, and the format of ASCEND_RT_VISIBLE_DEVICES.
"""
from __future__ import annotations

from platform_plugin.errors import Problem
from platform_plugin.ranktable import RankTableError, check_environment, select_server
from platform_plugin.settings import SOURCE_LABELS, VISIBLE_DEVICES

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from platform_plugin.ranktable import RankTable, Server
    from platform_plugin.settings import _Resolver


def table_problems(r: _Resolver, problems: list[Problem], source: str) -> None:
    # check_environment says what is wrong; the user also needs to know where it was set
    for p in problems:
        label = SOURCE_LABELS.get(source, f"the {source} value")
        r.problems.append(Problem(p.code, f"{p.message} ({p.path} came from {label}.)",
                                  p.path, p.severity))


def rank_start_from_table(r: _Resolver, table: RankTable, chosen: tuple[str, str] | None,
                          value: int | None,
                          local_addresses: set[str] | None) -> tuple[Server | None, int]:
    """This server's entry (by RANK_START if given, else by this host's addresses)."""
    try:
        server = select_server(table, rank_start=value, local_addresses=local_addresses)
    except RankTableError as exc:
        table_problems(r, exc.problems, chosen[0]) if chosen else r.problems.extend(exc.problems)
        r.row_from("RANK_START", chosen)
        return None, value or 0
    if chosen:
        r.row_from("RANK_START", chosen, f"server {server.server_id}")
    else:
        r.row("RANK_START", server.first_rank, "derived", f"first rank of server "
              f"{server.server_id}" + (" (this host)" if len(table.servers) > 1 else ""))
    return server, server.first_rank


def rank_size_from_table(r: _Resolver, table: RankTable, cands: list[tuple[str, str]]) -> int:
    """The table's RANK_SIZE; one set anywhere else must agree."""
    for source, value in cands:  # set anywhere and different from the table: an error
        if r.integer("RANK_SIZE", (source, value)) is not None:
            table_problems(r, check_environment(table, {"RANK_SIZE": value}), source)
    r.row("RANK_SIZE", table.rank_size, "derived", f"{len(table.servers)} server(s) in the table")
    return table.rank_size


def rank_and_device_from_table(r: _Resolver, table: RankTable, server: Server | None,
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
    table_problems(r, rank_problems, chosen[0] if chosen else "default")
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
            table_problems(r, check_environment(table, {
                "RANK_ID": str(rank_id), "DEVICE_ID": value, VISIBLE_DEVICES: visible or ""}),
                source)
    _server, device = table.device_for_rank(rank_id)
    via = f" via {VISIBLE_DEVICES}" if visible and device.device_id != device_id else ""
    r.row("DEVICE_ID", device_id, "derived", f"rank {rank_id} is physical device "
          f"{device.device_id}{via}")
    return rank_id, device_id


def check_visible_format(r: _Resolver, visible: str | None) -> None:
    """ASCEND_RT_VISIBLE_DEVICES must be a list of numbers whatever the mode: only a debug run
    with a table parsed it here, so `env`/`doctor --mode full` showed 'a,b' without a word and
    the launch refused it later."""
    if not visible or any(p.code == "RT_VISIBLE_DEVICES" for p in r.problems):
        return
    from platform_plugin.ranktable.model import parse_visible_devices
    try:
        parse_visible_devices(visible)
    except RankTableError as exc:
        r.problems.extend(exc.problems)
