"""`launch(cmd, **options)`'s keywords: `LaunchKeywords`, the options record as a `TypedDict`
(so an IDE and a type checker show every option of `launch()`), and `from_kwargs`, which turns
them into the validated LaunchOptions record (options.py declares the options; the CLI parses
flags there and never needs this module). tests/launcher/test_options.py checks that both list
the same names with the same types.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, TypedDict

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.options import FIELDS, LaunchOptions


class LaunchKeywords(TypedDict, total=False):
    """Every option of `launch()` (help: `platform-run launch --help`, docs/launch.md)."""

    nproc: Optional[int]
    nproc_per_node: Optional[int]  # torchrun's spelling of nproc
    backend: str
    rank_table: Optional[str]
    rank_start: Optional[int]
    mode: Optional[str]
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: Optional[int]
    control_port: Optional[int]
    log_dir: Optional[str]
    cache_dir: Optional[str]
    checkpoint_dir: Optional[str]
    job_name: Optional[str]
    timeout: Optional[float]
    silence_timeout: Optional[float]
    grace: float
    show: Optional[str]
    board_metrics: Optional[str]
    metrics_from_output: Optional[str]
    max_lines_per_s: Optional[float]
    buffered: bool
    kill_stale: bool
    tracking: str
    system_metrics_interval: float
    no_system_metrics: bool
    verbose: bool
    job_id: Optional[str]
    job_key: Optional[str]
    heartbeat_timeout: Optional[float]
    rank_dir: Optional[str]
    cluster_timeout: Optional[int]
    max_restarts: int
    background: bool
    detach: bool
    env: Dict[str, str]
    cwd: Optional[str]
    check: bool
    write: Optional[Callable[[str], Any]]


def _keyword(name: str) -> str:
    """A keyword or one of its aliases -> the field name; unknown -> ConfigError."""
    if name in FIELDS:
        return name
    for f in FIELDS.values():
        if name in f.metadata["aliases"]:
            return f.name
    known = sorted(list(FIELDS) + [a for f in FIELDS.values() for a in f.metadata["aliases"]])
    import difflib  # (a misspelt keyword only)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; the options are {', '.join(known)}"
    raise ConfigError([Problem("LAUNCH_UNKNOWN_OPTION", f"launch() has no option {name!r}{hint}",
                               name)])


def from_kwargs(kwargs: Dict[str, Any]) -> LaunchOptions:
    """`launch(cmd, **kwargs)` -> the validated record."""
    values: Dict[str, Any] = {}
    for name, value in kwargs.items():
        key = _keyword(name)
        if key in values:
            raise ConfigError([Problem("LAUNCH_UNKNOWN_OPTION", f"{name!r} repeats the option "
                                       f"{key!r}", name)])
        values[key] = value
    return LaunchOptions(**values)
