"""Launching: options -> plan (no processes) -> supervisor (processes) -> output (logs, display).
See docs/launch.md and docs/architecture.md.

Names load on first use (PEP 562): a rank that imports `platform_plugin.tracking` does not load
the launcher, and `platform-run launch --help` imports only the options record.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platform_plugin.launcher.api import launch
    from platform_plugin.launcher.options import LaunchOptions
    from platform_plugin.launcher.planning.plan import Host, LaunchPlan, RankSpec, build_plan
    from platform_plugin.launcher.processes.result import JobFailed, JobResult, RankFailure

_LAZY = {
    "launch": "platform_plugin.launcher.api",
    "LaunchOptions": "platform_plugin.launcher.options",
    "build_plan": "platform_plugin.launcher.planning.plan",
    "Host": "platform_plugin.launcher.planning.plan",
    "LaunchPlan": "platform_plugin.launcher.planning.plan",
    "RankSpec": "platform_plugin.launcher.planning.plan",
    "JobFailed": "platform_plugin.launcher.processes.result",
    "JobResult": "platform_plugin.launcher.processes.result",
    "RankFailure": "platform_plugin.launcher.processes.result",
}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))
