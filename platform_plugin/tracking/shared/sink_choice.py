"""Which sink and layout a job's tracking uses (`--tracking`, PLATFORM_TRACKING,
PLATFORM_TRACKING_LAYOUT): decided by the launcher before its ranks start, so without the sink
registry (tracking/sinks/) and its imports."""
from __future__ import annotations

import importlib.util
import os

from platform_plugin.errors import ConfigError
from platform_plugin.variables import PLATFORM_TRACKING, PLATFORM_TRACKING_LAYOUT

CHOICES = PLATFORM_TRACKING.choices
LAYOUTS = PLATFORM_TRACKING_LAYOUT.choices


def wflogger_importable() -> bool:
    try:
        return importlib.util.find_spec("wf_analyse.analyse") is not None
    except ModuleNotFoundError:
        return False


def choose(choice: str | None = None, environ: dict[str, str] | None = None) -> str | None:
    """The sink for a job: the explicit choice, else PLATFORM_TRACKING, else auto. Auto is
    mlflow, except on the platform (its wflogger SDK importable) when no MLflow URI is set.
    Returns None for "none"."""
    env = os.environ if environ is None else environ
    wanted = (choice if choice not in (None, "", "auto") else PLATFORM_TRACKING.raw(env)) or "auto"
    wanted = wanted.strip().lower()
    if wanted not in CHOICES:
        raise ConfigError(f"--tracking / PLATFORM_TRACKING is {wanted!r}: use one of "
                          f"{', '.join(CHOICES)}", code="TRACKING_CHOICE")
    if wanted == "auto":
        wanted = "wflogger" if wflogger_importable() and not env.get("MLFLOW_TRACKING_URI") else "mlflow"
    return None if wanted == "none" else wanted


def choose_layout(layout: str | None = None, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    value = (layout or PLATFORM_TRACKING_LAYOUT.raw(env) or PLATFORM_TRACKING_LAYOUT.default)
    value = value.strip().lower()
    if value not in LAYOUTS:
        raise ConfigError(f"PLATFORM_TRACKING_LAYOUT is {value!r}: use 'runs' (a child run per "
                          "rank) or 'flat' (one run, keys suffixed -RANK_ID)", code="TRACKING_LAYOUT")
    return value
