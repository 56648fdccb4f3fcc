"""`--show`: which processes' output the display streams, checked before anything starts."""
from __future__ import annotations

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.planning.plan import LaunchPlan


def parse_show(value: str | None) -> set[str] | None:
    """`all` -> None (everything, scheduler included), `none` -> empty, `0,3` -> {"0", "3"}."""
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
    """`parse_show`, and every named rank must be a process of this job on this server."""
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
