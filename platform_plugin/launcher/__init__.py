"""Launching: options -> plan (no processes) -> supervisor (processes) -> output (logs, display).
See docs/launch.md and docs/architecture.md.

Names load on first use (PEP 562): `platform-run launch --help` (its options come from
launcher/options.py, inside this package) does not import the launch itself.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "launch": "platform_plugin.launcher.api",
    "LaunchOptions": "platform_plugin.launcher.options",
    "build_plan": "platform_plugin.launcher.planning.plan",
    "Host": "platform_plugin.launcher.planning.plan",
    "LaunchPlan": "platform_plugin.launcher.planning.plan",
    "RankSpec": "platform_plugin.launcher.planning.plan",
    "JobFailed": "platform_plugin.launcher.processes.result",
    "JobResult": "platform_plugin.launcher.processes.result",
    "RankFailure": "platform_plugin.launcher.processes.rank_failure",
}

if TYPE_CHECKING:  # pragma: no cover
    from platform_plugin.launcher.api import launch
    from platform_plugin.launcher.options import LaunchOptions
    from platform_plugin.launcher.planning.plan import Host, LaunchPlan, RankSpec, build_plan
    from platform_plugin.launcher.processes.rank_failure import RankFailure
    from platform_plugin.launcher.processes.result import JobFailed, JobResult


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'platform_plugin.launcher' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


__all__ = list(_LAZY)
