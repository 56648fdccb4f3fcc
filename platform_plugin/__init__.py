"""platform_plugin: one trustworthy step from a notebook to a distributed job.

    import platform_plugin
    platform_plugin.launch(["python", "train.py"], nproc=2)   # -> JobResult, raises JobFailed

In a notebook: `%load_ext platform_plugin`, then `%dist_run --nproc 2 python train.py`.

The names below are loaded on first use (PEP 562), so `import platform_plugin.tracking` inside
a training rank does not pull in the launcher, settings or the notebook runner.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "launch": "platform_plugin.launcher.api",
    "JobResult": "platform_plugin.launcher.processes.result",
    "JobFailed": "platform_plugin.launcher.processes.result",
    "ConfigError": "platform_plugin.errors",
    "PlatformPluginError": "platform_plugin.errors",
    "run_notebook": "platform_plugin.notebook.run",
    "get_tracker": "platform_plugin.tracking.rank.tracker",
    "compare": "platform_plugin.comparison.view",
}

if TYPE_CHECKING:  # pragma: no cover
    from platform_plugin.errors import ConfigError, PlatformPluginError
    from platform_plugin.launcher.api import launch
    from platform_plugin.launcher.processes.result import JobFailed, JobResult
    from platform_plugin.notebook.run import run_notebook
    from platform_plugin.tracking.rank.tracker import get_tracker
    from platform_plugin.comparison.view import compare


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'platform_plugin' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


def load_ipython_extension(ipython) -> None:
    from platform_plugin.magics.dist_run import register  # IPython: only inside IPython
    register(ipython)


__all__ = ["launch", "JobResult", "JobFailed", "ConfigError", "PlatformPluginError",
           "run_notebook", "get_tracker", "compare", "__version__", "load_ipython_extension"]
