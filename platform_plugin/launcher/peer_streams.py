"""torchrun's stream flags and `--show local:...`: which local ranks' output is shown.

torchrun keys `--redirects`, `--tee` and `--local-ranks-filter` by LOCAL rank (its LogsSpecs
reads them for local ranks 0..nproc-1 on every server, `Std.from_str` / `to_map`): here they
become `--show local:0,3` (local ranks 0 and 3 of every server) or `local:^1` (every process but
local rank 1), which display/show.check_show resolves against each server's plan. A rank's
output reaches the console unless it is redirected and not teed; the filter then keeps the
local ranks it names. options.PEER_FLAGS reads the three in that order, each from what the one
before left in `show`.
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, Iterable, Optional, Tuple

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.numbers import whole_number

LOCAL_SHOW = "local:"  # --show local:0,3 = local ranks 0 and 3 of every server; local:^1 = all but 1


def local_show(value: str) -> Optional[Tuple[bool, FrozenSet[int]]]:
    """`--show local:0,3` -> (False, {0, 3}); `local:^1` (every process but local rank 1) ->
    (True, {1}); None: not the local form, or not a valid one."""
    text = value.strip().lower()
    if not text.startswith(LOCAL_SHOW):
        return None
    text = text[len(LOCAL_SHOW):].strip()
    excluded = text.startswith("^")
    parts = [part.strip() for part in text.lstrip("^").split(",") if part.strip()]
    numbers = [whole_number(part) for part in parts]
    if not parts or any(n is None for n in numbers):
        return None
    return excluded, frozenset(n for n in numbers if n is not None)


def local_show_text(excluded: bool, ranks: Iterable[int]) -> str:
    """(excluded, local ranks) as a --show value: `all`, `none`, `local:0,3`, `local:^1`."""
    listed = ",".join(str(r) for r in sorted(set(ranks)))
    if not listed:
        return "all" if excluded else "none"
    return f"{LOCAL_SHOW}{'^' if excluded else ''}{listed}"


def _std_ranks(value: str, flag: str) -> Tuple[bool, FrozenSet[int]]:
    """torchrun's per-local-rank stream spec (its `Std.from_str`): `3` (every local rank) or
    `0:3,1:0` (the local ranks named; the others 0) -> (excluded, local ranks) whose streams it
    takes: `3` -> (True, {}) = all; `0:3,1:0` -> (False, {0})."""
    spec = value.strip()
    if ":" not in spec:
        return (spec != "0"), frozenset()
    picked = set()
    for part in spec.split(","):
        rank, _, std = part.partition(":")
        number = whole_number(rank.strip())
        if number is None or std.strip() not in ("0", "1", "2", "3"):
            raise ConfigError([Problem("LAUNCH_BAD_SHOW", f"{flag} {value!r}: write 0-3 or "
                                       "LOCAL_RANK:0-3,... e.g. 0:3,1:2", flag)])
        if std.strip() != "0":
            picked.add(number)
    return False, frozenset(picked)


def _shown_so_far(values: Dict[str, Any]) -> Tuple[bool, FrozenSet[int]]:
    """What an earlier stream flag of the same command left in --show: (excluded, local ranks)."""
    show = values.get("show")
    if show in (None, "all"):
        return True, frozenset()
    if show == "none":
        return False, frozenset()
    return local_show(show) or (True, frozenset())


STD_VALUES = "0|1|2|3|LOCAL_RANK:V,..."


def redirects_to_show(value: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """Redirected streams go to the log file only: every other local rank stays shown."""
    excluded, ranks = _std_ranks(value, "--redirects")
    if excluded:  # every local rank redirected: none shown (unless --tee names some)
        return {"show": "none"}
    return {"show": local_show_text(True, ranks)}


def tee_to_show(value: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """Teed streams go to the screen and the log: shown even when redirected."""
    all_teed, teed = _std_ranks(value, "--tee")
    excluded, ranks = _shown_so_far(given)
    if all_teed:
        return {"show": "all"}
    if excluded:  # shown: every local rank but `ranks` -> but fewer of them
        return {"show": local_show_text(True, ranks - teed)}
    return {"show": local_show_text(False, ranks | teed)}


def ranks_filter_to_show(value: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """torchrun's --local-ranks-filter 0,3: only these local ranks on the console."""
    kept = local_show(LOCAL_SHOW + value)
    if kept is None or kept[0]:
        raise ConfigError([Problem("LAUNCH_BAD_SHOW", f"--local-ranks-filter {value!r}: write "
                                   "local rank numbers such as 0,3", "--local-ranks-filter")])
    excluded, ranks = _shown_so_far(given)
    return {"show": local_show_text(False, kept[1] - ranks if excluded else kept[1] & ranks)}
