"""MLflow conventions, the facts side (stdlib only): which experiment, which store, which source.

- Experiment: `MLFLOW_EXPERIMENT_NAME`, else one per project: the notebook being run
  (`platform-run debug|full` sets PLATFORM_NOTEBOOK; in a Jupyter kernel, its notebook's path
  as the server says it when the job starts - after a rename too - else JPY_SESSION_NAME), else the project folder (the folder holding CODE/ when the ranks run inside a CODE/
  folder, else the ranks' working folder). Never the script's stem: every `%%dist_run` cell
  would land in an experiment `cell`, every typo in its own.
- Store: `MLFLOW_TRACKING_URI`, else `sqlite:///<folder>/mlflow.db` where the folder is the one
  holding CODE/ (the platform snapshots CODE/ and a full run cleans it: a store inside would be
  copied into every snapshot and is no place for history) or, outside any CODE/ folder, the
  ranks' working folder.
- Source: the notebook (`NOTEBOOK`) of a notebook run, else the script of the command (`LOCAL`).
The MLflow tag keys these facts become are MLflow's own constants (sinks/mlflow_tags.py).
"""
from __future__ import annotations

import getpass
import json
import os
from typing import Any, Mapping

from platform_plugin.tracking.shared.jupyter_session import current_notebook
from platform_plugin.util.project import code_dir, project_dir
from platform_plugin.variables import PLATFORM_NOTEBOOK, PLATFORM_NOTEBOOK_PARAMETERS

NOTEBOOK_ENV = PLATFORM_NOTEBOOK.name  # set by the notebook runner: the notebook's path
NOTEBOOK_PARAMETERS_ENV = PLATFORM_NOTEBOOK_PARAMETERS.name  # its resolved parameters, JSON
JUPYTER_SESSION_ENV = "JPY_SESSION_NAME"  # set by jupyter_server in every kernel it starts
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def notebook_path(environ: Mapping[str, str]) -> str | None:
    """The notebook run by papermill (PLATFORM_NOTEBOOK), else the kernel's notebook as its
    Jupyter server names it now (renamed since the kernel started: jupyter_session.py), else
    the name the server gave the kernel at its start."""
    if environ.get(NOTEBOOK_ENV):
        return environ[NOTEBOOK_ENV]
    if not environ.get(JUPYTER_SESSION_ENV):
        return None
    return current_notebook(environ) or environ[JUPYTER_SESSION_ENV]


def _stem(path: str) -> str:
    name = os.path.basename(path.rstrip(os.sep))
    dot = name.rfind(".")
    return name[:dot] if 0 < dot < len(name) - 1 else name  # = pathlib's PurePath.stem


def experiment_name(environ: Mapping[str, str], cwd: str | os.PathLike | None) -> str:
    return experiment_choice(environ, cwd)[0]


def experiment_choice(environ: Mapping[str, str], cwd: str | os.PathLike | None) -> tuple[str, str]:
    """(the experiment, where its name comes from): `platform-run env` says both - in a terminal
    the project folder names it, while the same project's notebooks track into theirs."""
    if environ.get("MLFLOW_EXPERIMENT_NAME"):
        return environ["MLFLOW_EXPERIMENT_NAME"], "MLFLOW_EXPERIMENT_NAME"
    notebook = notebook_path(environ)
    if notebook and _stem(notebook):
        return _stem(notebook), "the notebook's name"
    return (os.path.basename(project_dir(cwd, environ)) or "platform_plugin",
            "the project folder's name; a notebook's jobs track into the notebook's name, "
            "MLFLOW_EXPERIMENT_NAME names one for all")


def default_store(cwd: str | os.PathLike | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """(tracking URI, where it came from) — `platform-run env` shows both."""
    if environ.get("MLFLOW_TRACKING_URI"):
        return environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
    code = code_dir(cwd, environ)
    folder = project_dir(cwd, environ)
    why = f"default: beside {os.path.basename(code)}/, outside what the platform snapshots" if code \
        else "default: the working folder (no CODE/ folder around it)"
    return f"sqlite:///{os.path.join(os.path.realpath(folder), 'mlflow.db')}", why


def source(environ: Mapping[str, str], command: Any, cwd: str | os.PathLike | None) -> tuple[str, str]:
    """(source name, MLflow source type name) of a job: its notebook, else its script."""
    notebook = environ.get(NOTEBOOK_ENV)
    if notebook:
        return os.path.realpath(notebook), "NOTEBOOK"
    words = [command] if isinstance(command, str) else [str(w) for w in command]
    script = next((w for w in words if w.endswith((".py", ".sh", ".ipynb"))), None)
    if script is None:
        return " ".join(words), "LOCAL"
    return os.path.realpath(os.path.join(cwd or os.getcwd(), script)), "LOCAL"


def notebook_parameters(environ: Mapping[str, str]) -> dict[str, str]:
    """The notebook run's resolved parameters (the -p / profile values) as MLflow params."""
    try:
        params = json.loads(environ.get(NOTEBOOK_PARAMETERS_ENV) or "{}")
    except ValueError:
        return {}
    if not isinstance(params, dict):
        return {}
    return {str(k): (v if isinstance(v, str) else json.dumps(v))[:MAX_PARAM_CHARS]
            for k, v in params.items()}


def user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry (containers): MLflow's own fallback
        return "unknown"
