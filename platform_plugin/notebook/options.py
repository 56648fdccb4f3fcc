"""The options of a notebook run: ONE record, `NotebookOptions`, for `platform-run debug|full`
and `run_notebook()`, as `LaunchOptions` is for the launch. Each field carries its flags and
their help; `add_arguments(parser, mode)` makes the CLI's flags from it and `from_arguments`
turns the parsed flags back into the record. What only the command line has (the notebook and
output positionals, `--dry-run`, `--log-output`) and the cleanup's `--only`/`--keep` (shared with
`platform-run clean`) are declared by the CLI.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any, Dict, Optional, Tuple

from platform_plugin.notebook.params import parse_yaml_parameters
from platform_plugin.util.numbers import number_argument
from platform_plugin.util.paths import checked_path


def flag(default: Any, *flags: str, **argparse_options: Any) -> Any:
    """One option: its default, its CLI `flags` (none: keyword only) and their argparse options
    (`help` may name `{mode}`)."""
    return dataclasses.field(default=default, metadata={"flags": flags, "cli": argparse_options})


@dataclasses.dataclass(frozen=True)
class NotebookOptions:
    """What the caller of a notebook run asked for; `prepare_run` checks and resolves it."""

    pairs: Tuple[Tuple[str, str], ...] = flag(
        (), "-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
        help="set a parameter (repeatable; typed like papermill's -p)")
    params_file: Optional[str] = flag(
        None, "-f", "--parameters-file", metavar="PARAMS.yaml",
        help="YAML mapping of parameters (overrides the profile)")
    parameters: Optional[Dict[str, Any]] = flag(
        None, "-y", "--parameters-yaml", action="append", metavar="YAML",
        help="parameters as a YAML mapping, e.g. -y '{epochs: 3}' (as papermill's -y; -p wins "
             "over it)")
    profile: Optional[str] = flag(
        None, "--profile", metavar="platform.toml",
        help="profile with [{mode}.parameters] (default: platform.toml in --cwd, if present)")
    output: Optional[str] = flag(
        None, "--output", metavar="OUT.ipynb", type=checked_path("NB_OUTPUT", "--output"),
        help="executed notebook (default: runs/<timestamp>-<mode>-<name>.ipynb under --cwd)")
    cwd: Optional[str] = flag(
        None, "--cwd", metavar="DIR", type=checked_path("NB_CWD", "--cwd"),
        help="project folder: the kernel's working directory, where platform.toml and .env "
             "are found (default: the notebook's folder, as JupyterLab does)")
    kernel: Optional[str] = flag(
        None, "-k", "--kernel", metavar="NAME",
        help="Jupyter kernel (default: the notebook's kernelspec)")
    timeout: Optional[float] = flag(
        None, "--timeout", type=number_argument("NB_TIMEOUT", "--timeout"), metavar="S",
        help="fail a cell that runs longer than S seconds")
    env_file: Optional[str] = flag(
        None, "--env-file", metavar=".env", type=checked_path("CLI_PATH", "--env-file"), help="user settings file (default: the .env files "
        "from --cwd up to the folder holding CODE/)")
    verbose: bool = flag(
        False, "--verbose", action="store_true",
        help="also show library chatter and the kernel's own warnings")
    # None: a full run cleans CODE/ first, a debug run does not (`--no-cleanup` of `full`)
    cleanup: Optional[bool] = flag(None)
    only: Optional[Tuple[str, ...]] = flag(None)  # the categories to clean (`--only`)
    keep: Tuple[str, ...] = flag(())  # globs never removed (`--keep`)

    def __post_init__(self) -> None:
        """A path given to run_notebook() is checked as its flag is on the command line (the
        text alone, before anything is created): the API has no argparse to do it."""
        for f in dataclasses.fields(self):
            check, value = f.metadata["cli"].get("type"), getattr(self, f.name)
            if isinstance(check, checked_path) and value is not None:
                check(os.fspath(value))

    def cleans(self, mode: str) -> bool:
        return self.cleanup if self.cleanup is not None else mode == "full"


FIELDS = {f.name: f for f in dataclasses.fields(NotebookOptions)}


def add_arguments(parser: argparse.ArgumentParser, mode: str) -> None:
    """The record's flags (no defaults of their own: the record's apply in from_arguments)."""
    for f in FIELDS.values():
        flags, options = f.metadata["flags"], dict(f.metadata["cli"])
        if not flags:
            continue
        options["help"] = options["help"].replace("{mode}", mode)
        if options.get("action") != "store_true":
            options.setdefault("default", None)
        parser.add_argument(*flags, dest=f.name, **options)


def from_arguments(args: argparse.Namespace, **overrides: Any) -> NotebookOptions:
    """Parsed flags (+ what the CLI resolved itself: `output`, the cleanup's) -> the record."""
    values = {name: getattr(args, name) for name, f in FIELDS.items()
              if f.metadata["flags"] and getattr(args, name, None) is not None}
    if "pairs" in values:
        values["pairs"] = tuple(tuple(pair) for pair in values["pairs"])
    if "parameters" in values:  # -y YAML ...: one mapping
        values["parameters"] = parse_yaml_parameters(values["parameters"]) or None
    values.update(overrides)
    return NotebookOptions(**values)
