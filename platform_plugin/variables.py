"""Every `PLATFORM_*` environment variable this package reads or sets, declared once.

Like MLflow's `environment_variables.py`: each variable has a name, a type, a default and a doc,
and `.get()` reads and converts it (a value that does not convert is a ConfigError with code
`ENV_BAD_VALUE`, naming the variable). Code reads `PLATFORM_LOG_DIR.get()`, never
`os.environ["PLATFORM_LOG_DIR"]`; `tests/test_layout.py` checks that every `PLATFORM_` name in
the package is declared here.

The one exception is the rank side (tracking's tracker and identity, checkpoint/manifest.py): it
imports only the stdlib, so it reads `PLATFORM_TRACKING_SPOOL_DIR`, `PLATFORM_JOB_NAME`,
`PLATFORM_SERVER_ID`, `PLATFORM_CHECKPOINT_DIR`, `PLATFORM_RESUME_STEP` and `PLATFORM_ATTEMPT_NUMBER`
with `os.environ` — the names are still declared (and documented) here.

Stdlib, `errors` and `util.numbers` (the one reading of a number) only: every layer may import
this module.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping, Optional

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util import numbers


@dataclasses.dataclass(frozen=True, repr=False)
class Variable:
    """One variable."""

    name: str
    type: Callable[[str], Any]  # str, float, ...
    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    set_by: str = "user"  # "user" | "launcher" (for every rank) | "notebook runner" (kernel)
    code: str = "ENV_BAD_VALUE"  # the Problem code of a value that does not fit
    bounds: Optional[numbers.Bounds] = None  # the range of a number

    def __repr__(self) -> str:
        return f"Variable({self.name!r})"

    def get(self, environ: Mapping[str, str] | None = None) -> Any:
        """The converted value, or `default` when unset or empty. A number is read as the docs
        write it (util/numbers.py: ASCII digits; no `1_000`, `+1`, nan or inf) within `bounds`."""
        raw = self.raw(environ)
        if raw == "":
            return self.default
        try:
            if self.type in (int, float):
                value = numbers.read(raw, self.type, bounds=self.bounds)
            else:
                value = self.type(raw)
        except ValueError as exc:
            raise ConfigError([Problem(self.code, f"{self.name} {numbers.shown(raw)}: {exc} "
                                       f"({self.doc})", self.name)]) from None
        if self.choices and value not in self.choices:
            raise ConfigError([Problem(self.code, f"{self.name} is {numbers.shown(raw)}: use one "
                                       f"of {', '.join(self.choices)}", self.name)])
        return value

    def raw(self, environ: Mapping[str, str] | None = None) -> str:
        """The text as set (stripped), "" when unset: for callers that check it themselves."""
        return ((os.environ if environ is None else environ).get(self.name) or "").strip()

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        return bool(self.raw(environ))

    def fallback_help(self, text: str, otherwise: str) -> str:
        """The help of an option that falls back to this variable: `text (else VAR, else
        otherwise)` (the launch options and the flags other commands share say it alike)."""
        return f"{text} (else {self.name}, else {otherwise})"

    def __str__(self) -> str:
        return self.name


def _lower(text: str) -> str:
    return text.lower()


_lower.__name__ = "name"

PLATFORM_RUN_MODE = Variable(
    "PLATFORM_RUN_MODE", str, None, "debug (调试环境) or full (全量运行); the platform sets it, "
    "`platform-run debug|full` exports it to the kernel", choices=("debug", "full"),
    code="ENV_MODE")
PLATFORM_LOG_DIR = Variable(
    "PLATFORM_LOG_DIR", str, "platform_logs", "where job folders go (relative to the working "
    "folder), unless --log-dir is given")
PLATFORM_CACHE_DIR = Variable(
    "PLATFORM_CACHE_DIR", str, None, "compile caches and Ascend process logs, one folder per job "
    "(default ~/.cache/platform_plugin), unless --cache-dir is given")
PLATFORM_CODE_DIR = Variable(
    "PLATFORM_CODE_DIR", str, None, "the CODE/ folder `platform-run clean` cleans (default: the "
    "nearest ancestor named CODE)")
PLATFORM_MLFLOW_UI = Variable(
    "PLATFORM_MLFLOW_UI", str, None, "base URL of the MLflow UI that `platform-run compare` "
    "links to")
PLATFORM_MLFLOW_UI_EARLY = Variable(
    "PLATFORM_MLFLOW_UI_EARLY", str, "1", "0: a tracked %dist_run job does not start its store's "
    "MLflow UI while it runs (at low priority, once per kernel: %dist_compare's page is then "
    "there at once); the UI starts when %dist_compare asks for it")
PLATFORM_TRACKING = Variable(
    "PLATFORM_TRACKING", _lower, "auto", "metrics sink when --tracking is not given",
    choices=("auto", "mlflow", "wflogger", "none"), code="TRACKING_CHOICE")


def tracking_off() -> dict[str, str]:
    """The variables of a rank of an untracked job (its tracker spools nothing): what the
    no-op handle's `Untracked.prepare()` gives (tracking/job/report.py: a job whose sink
    resolves to none), and the launcher's own for `--tracking none`, which needs nothing else
    of tracking."""
    return {PLATFORM_TRACKING.name: "none"}


PLATFORM_TRACKING_LAYOUT = Variable(
    "PLATFORM_TRACKING_LAYOUT", _lower, "runs", "MLflow layout: runs (a child run per rank) or "
    "flat (one run, keys suffixed -RANK_ID)", choices=("runs", "flat"), code="TRACKING_LAYOUT")
PLATFORM_TRACKING_DRAIN_TIMEOUT = Variable(
    "PLATFORM_TRACKING_DRAIN_TIMEOUT", float, None, "seconds to wait at the end of a job for "
    "metrics still on their way to the sink", bounds=numbers.NOT_NEGATIVE)
PLATFORM_WFLOGGER_CALL_TIMEOUT = Variable(
    "PLATFORM_WFLOGGER_CALL_TIMEOUT", float, 30.0, "seconds a wflogger SDK call may take before "
    "it counts as hung (its record waits for the next try or for sync)",
    bounds=numbers.POSITIVE)
PLATFORM_JOB_ID = Variable(
    "PLATFORM_JOB_ID", str, None, "the job's id on every server of a multi-server job (else "
    "agreed by the servers)")
PLATFORM_JOB_KEY = Variable(
    "PLATFORM_JOB_KEY", str, None, "the key that signs the messages between the launchers of a "
    "multi-server job (a string, or @FILE of a file only its owner reads); the same on every "
    "server")
PLATFORM_HEARTBEAT_TIMEOUT = Variable(
    "PLATFORM_HEARTBEAT_TIMEOUT", float, None, "seconds of silence after which the other "
    "launchers of a multi-server job take a server's launcher for failed (frozen or cut off)",
    bounds=numbers.Bounds(0, 60, above=True))
# the launchers' control port on the rank-table route (the table has no rendezvous port)
RANK_TABLE_CONTROL_PORT = 29600
PLATFORM_CONTROL_PORT = Variable(
    "PLATFORM_CONTROL_PORT", int, RANK_TABLE_CONTROL_PORT, "the port on which the rank table's "
    "first server's launcher listens for the other servers' launchers (rank-table route)",
    bounds=numbers.PORT)
PLATFORM_RENDEZVOUS_TIMEOUT = Variable(
    "PLATFORM_RENDEZVOUS_TIMEOUT", float, 300.0, "seconds the launchers of a multi-server job "
    "wait for each other at the start", bounds=numbers.POSITIVE)
# set by `platform-run debug|full` for the kernel (tracking shows them on the job's parent run)
PLATFORM_NOTEBOOK = Variable("PLATFORM_NOTEBOOK", str, None, "the notebook being run",
                             set_by="notebook runner")
PLATFORM_NOTEBOOK_PARAMETERS = Variable(
    "PLATFORM_NOTEBOOK_PARAMETERS", str, None, "the notebook's resolved parameters (JSON)",
    set_by="notebook runner")
PLATFORM_NOTEBOOK_RUN = Variable(
    "PLATFORM_NOTEBOOK_RUN", str, None, "a tag of one notebook run: what its kernel started and "
    "left running is stopped when the run ends", set_by="notebook runner")
PLATFORM_STREAM_TO_TERMINAL = Variable(
    "PLATFORM_STREAM_TO_TERMINAL", str, None, "1: %dist_run in a notebook run by `platform-run "
    "debug|full` also streams rank output to the terminal", set_by="notebook runner")
# set by the launcher for every rank
PLATFORM_ATTEMPT_NUMBER = Variable(
    "PLATFORM_ATTEMPT_NUMBER", int, None, "which attempt of the job this is: 1 for the first, 2 "
    "for the first restart (--max-restarts), ...", set_by="launcher", bounds=numbers.Bounds(1))
PLATFORM_JOB_NAME = Variable("PLATFORM_JOB_NAME", str, None, "the job's name", set_by="launcher")
PLATFORM_JOB_DIR = Variable("PLATFORM_JOB_DIR", str, None, "the job's folder (logs, job.json)",
                            set_by="launcher")
PLATFORM_CHECKPOINT_DIR = Variable(
    "PLATFORM_CHECKPOINT_DIR", str, None, "the job's checkpoint folder, kept across its restarts "
    "(the launcher sets it for every rank: --checkpoint-dir, else this variable, else "
    "<job folder>/checkpoints)", set_by="launcher")
PLATFORM_RESUME_STEP = Variable(
    "PLATFORM_RESUME_STEP", int, None, "the step of the newest complete checkpoint node 0 found "
    "before the attempt, the one every rank resumes from (unset: from the beginning)",
    set_by="launcher", bounds=numbers.NOT_NEGATIVE)
PLATFORM_SERVER_ID = Variable("PLATFORM_SERVER_ID", str, None, "this server's id in the rank "
                              "table (else localhost)", set_by="launcher")
PLATFORM_TRACKING_HELPER = Variable(
    "PLATFORM_TRACKING_HELPER", str, None, "the spool folder, in the environment of the "
    "launcher's delivery helper process (marks it for tests and process sweeps)",
    set_by="launcher")
PLATFORM_TRACKING_SPOOL_DIR = Variable(
    "PLATFORM_TRACKING_SPOOL_DIR", str, None, "where a rank spools its metrics for the "
    "launcher's forwarder", set_by="launcher")

VARIABLES: dict[str, Variable] = {v.name: v for v in (
    PLATFORM_RUN_MODE, PLATFORM_LOG_DIR, PLATFORM_CACHE_DIR, PLATFORM_CODE_DIR,
    PLATFORM_MLFLOW_UI, PLATFORM_MLFLOW_UI_EARLY, PLATFORM_TRACKING, PLATFORM_TRACKING_LAYOUT,
    PLATFORM_TRACKING_DRAIN_TIMEOUT, PLATFORM_WFLOGGER_CALL_TIMEOUT, PLATFORM_JOB_ID, PLATFORM_RENDEZVOUS_TIMEOUT,
    PLATFORM_JOB_KEY, PLATFORM_HEARTBEAT_TIMEOUT, PLATFORM_CONTROL_PORT,
    PLATFORM_NOTEBOOK, PLATFORM_NOTEBOOK_PARAMETERS, PLATFORM_NOTEBOOK_RUN, PLATFORM_STREAM_TO_TERMINAL,
    PLATFORM_ATTEMPT_NUMBER, PLATFORM_TRACKING_HELPER, PLATFORM_JOB_NAME, PLATFORM_JOB_DIR, PLATFORM_SERVER_ID,
    PLATFORM_TRACKING_SPOOL_DIR, PLATFORM_CHECKPOINT_DIR, PLATFORM_RESUME_STEP)}


def refused_values(environ: Mapping[str, str]) -> list[Problem]:
    """A problem for every variable a user sets whose value does not fit (a number that is
    none or out of range, a choice not offered): a launch checks them all before anything of
    the job exists, though some are read only later (PLATFORM_RENDEZVOUS_TIMEOUT at the
    rendezvous, PLATFORM_TRACKING_DRAIN_TIMEOUT at the end)."""
    problems = []
    for variable in VARIABLES.values():
        if variable.set_by != "user":
            continue
        try:
            variable.get(environ)
        except ConfigError as exc:
            problems.extend(exc.problems)
    return problems
