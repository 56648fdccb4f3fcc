"""`--show`: which processes' output the display streams, checked before anything starts."""
from __future__ import annotations

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.peer_streams import local_show
from platform_plugin.launcher.planning.plan import LaunchPlan


def parse_show(value: str | None) -> set[str] | None:
    """`all` -> None (everything, scheduler included), `none` -> empty, `0,3` -> {"0", "3"}
    (`local:0,3` needs the plan: check_show)."""
    value = (value or "all").strip().lower()
    if value == "all":
        return None
    if value == "none":
        return set()
    names = {part.strip() for part in value.split(",") if part.strip()}
    if not names or not all(n.isdigit() or n == "sched" for n in names):
        raise _bad_show(f"--show {value!r}: use all, none, sched or comma-separated rank numbers "
                        "such as 0,3")
    return {str(int(n)) if n.isdigit() else n for n in names}


def check_show(value: str | None, plan: LaunchPlan) -> set[str] | None:
    """`parse_show`, and every named rank must be a process of this job on this server;
    `local:0,3` (torchrun's --tee/--redirects/--local-ranks-filter too): this server's
    processes of those local ranks, `local:^1`: every process of this server but local rank 1."""
    local = local_show(value or "")
    if local is not None:
        excluded, ranks = local
        here = {r.local_rank: r.name for r in plan.workers if r.local_rank is not None}
        if excluded:
            return {r.name for r in plan.ranks if r.local_rank not in ranks}
        missing = sorted(ranks - set(here))
        if missing:
            raise _bad_show(f"--show {value!r}: local rank {', '.join(map(str, missing))} is not "
                            f"on this server (it runs local ranks 0-{len(here) - 1})")
        return {here[rank] for rank in ranks}
    shown = parse_show(value)
    names = {r.name for r in plan.ranks}
    unknown = sorted(shown - names) if shown else []
    if unknown:
        raise _bad_show(f"--show {value!r}: {', '.join(unknown)} is not a process of this job on "
                        f"this server (it runs {', '.join(sorted(names, key=_rank_order))})")
    return shown


def _rank_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (-1, name)


def _bad_show(message: str) -> ConfigError:
    return ConfigError([Problem("LAUNCH_BAD_SHOW", message, "--show")])
