"""Run a notebook in the debug or full-run environment through papermill.

    run = prepare_run("full", "train.ipynb", pairs=[("epochs", "3")])  # every check, nothing runs
    result = execute(run)                                             # kernel + papermill
    result.ok, result.output, result.failure

`prepare_run` resolves all that can be wrong before a kernel starts (notebook, kernel, profile,
parameters, the mode's platform variables): a mistake is a ConfigError (exit 2), never a
half-run notebook. `execute` exports the variables to the kernel, streams cell output live,
turns every way a notebook can fail (a cell error, a failed rank: `%dist_run` raises JobFailed,
a cell timeout, a dead kernel) into a `CellFailure` (exit 1), and stops what the kernel left.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

from platform_plugin import settings as settings_module
from platform_plugin.cleanup import run as cleanup
from platform_plugin.folder_locks.cleanup import CleanupLock
from platform_plugin.cleanup.report import CleanupReport
from platform_plugin.errors import ConfigError, PlatformPluginError
from platform_plugin.notebook.failure import (CellFailure, CellWatcher, FailureKind,
    escaped_failure_kind, failure_from, record_escaped_failure)
from platform_plugin.launcher.display.notebook_display import TERMINAL_ENV
from platform_plugin.notebook.params import (load_params_file, load_profile, merge_parameters,
                                             parameters_json)
from platform_plugin.notebook.interrupt import interruptible
from platform_plugin.notebook.live import LiveStream
from platform_plugin.notebook.options import NotebookOptions
from platform_plugin.notebook.save import OutputNotSaved, atomic_saves, outputs_folder
from platform_plugin.notebook.strays import swept
from platform_plugin.folder_locks.protocol import JobHold
from platform_plugin.util.folders import check_writable_folder
from platform_plugin.util.paths import resolved
from platform_plugin.variables import PLATFORM_NOTEBOOK, PLATFORM_NOTEBOOK_PARAMETERS, PLATFORM_RUN_MODE

MODES = settings_module.MODES
RUNS_DIR = "runs"
DEFAULT_KERNEL = "python3"
# 1e308 passed the finite check and overflowed in nbclient after the kernel started
MAX_TIMEOUT_S = 10_000_000  # ~115 days


@dataclasses.dataclass(frozen=True)
class NotebookRun:
    """Everything a run needs, resolved and checked. `--dry-run` prints this."""

    mode: str
    notebook: Path
    output: Path
    cwd: Path
    kernel: str
    kernel_dir: str
    parameters: dict[str, Any]
    env: dict[str, str]  # added to the kernel's environment
    timeout: int | None  # seconds per cell
    profile: Path | None
    sources: dict[str, str] = dataclasses.field(default_factory=dict)  # profile|file|-p|injected
    output_default: bool = False  # output is the default name, not claimed yet (claim_output)


@dataclasses.dataclass(frozen=True)
class NotebookResult:
    run: NotebookRun
    ok: bool
    duration_s: float
    failure: CellFailure | None = None
    exited_at: int | None = None  # 0-based cell that ended the run early with sys.exit(0)
    skipped: int = 0  # code cells after it, which did not run

    @property
    def output(self) -> Path:
        return self.run.output

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


# ------------------------------------------------------------------ preparing

def prepare_run(mode: str, notebook: str | os.PathLike,
                options: NotebookOptions = NotebookOptions(), *,
                environ: dict[str, str] | None = None) -> NotebookRun:
    """Check and resolve a run. Raises ConfigError for anything the user must fix."""
    cwd, kernel, timeout, output = options.cwd, options.kernel, options.timeout, options.output
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}", code="NB_MODE")
    path = resolved(notebook, "notebook", "NB_INVALID")
    project = resolved(cwd or path.parent, "project folder", "NB_CWD", "--cwd")  # as JupyterLab
    if not project.is_dir():
        raise ConfigError(f"--cwd {project} is not a folder", code="NB_CWD")
    nb = read_notebook(path)
    check_parameters_cell(nb, path)
    kernel_name, kernel_dir = check_kernel(kernel or _notebook_kernel(nb))
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise ConfigError(f"--timeout {timeout}: give a positive number of seconds per cell, "
                          f"at most {MAX_TIMEOUT_S:,} (leave it out for no limit)",
                          code="NB_TIMEOUT")
    profile_params, profile_path = load_profile(mode, options.profile, project)
    merged, sources = merge_parameters(mode, profile_params,
                                       load_params_file(options.params_file), options.pairs,
                                       options.parameters)
    settings = settings_module.resolve(mode, environ=environ, env_file=options.env_file,
                                       cwd=str(project))
    env = {**settings.process_env()}
    env.setdefault(PLATFORM_RUN_MODE.name, mode)
    # for tracking: the job's experiment, source and params (the parent run shows them)
    env[PLATFORM_NOTEBOOK.name] = str(path)
    env[PLATFORM_NOTEBOOK_PARAMETERS.name] = parameters_json(merged, PLATFORM_NOTEBOOK_PARAMETERS.name)
    out = resolved(output, "output notebook", "NB_OUTPUT", "--output") if output else \
        default_output(project, mode, path)
    if out == path:
        raise ConfigError(f"--output {out} is the input notebook: choose another file",
                          code="NB_OUTPUT")
    if out.is_dir():
        raise ConfigError(f"--output {out} is a folder: give the notebook's file name, e.g. "
                          f"{out / path.name}", code="NB_OUTPUT")
    check_writable_folder(str(out.parent), "output", "NB_OUTPUT_DIR", "--output")
    whole = outputs_folder(str(out))  # a cell's long output goes there (bounded.py)
    if os.path.lexists(whole) and not os.path.isdir(whole):
        raise ConfigError(f"{whole} is not a folder: a cell's long output would go there; "
                          "move it or choose another --output", code="NB_OUTPUT")
    return NotebookRun(mode, path, out, project, kernel_name, kernel_dir, merged, env,
                       max(1, math.ceil(timeout)) if timeout else None, profile_path, sources,
                       output_default=not output)


# an nbformat NotebookNode: nbformat is imported where a notebook is read, not with this module
Notebook = Any


def read_notebook(path: Path) -> Notebook:
    import nbformat  # here, not at the top: `platform-run clean` imports this module too

    if not path.is_file():
        if os.path.lexists(path):  # a folder, FIFO, device, dangling link: "not found" misled
            raise ConfigError(f"notebook {path} is not a file (a folder, FIFO, device or a link "
                              "to nothing): give the .ipynb file", code="NB_INVALID")
        raise ConfigError(f"notebook {path} not found", code="NB_MISSING")
    try:
        return nbformat.read(path, as_version=4)
    except Exception as exc:  # nbformat raises several unrelated types for a bad file
        raise ConfigError(f"{path} is not a readable notebook: {exc}", code="NB_INVALID")


def check_parameters_cell(nb: Notebook, path: Path) -> None:
    """papermill injects the parameters after the FIRST cell tagged `parameters`: a second one
    runs after the injected cell and puts its defaults back (`-p epochs 30` ran 1 epoch, exit
    0). Tags that are not a list of strings made papermill raise TypeError once it started."""
    tagged = []
    for number, cell in enumerate(nb.cells, 1):
        tags = cell.get("metadata", {}).get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ConfigError(f"{path}: cell {number}'s tags are {tags!r}, not a list of names "
                              "(edit the notebook's JSON, or the tags in JupyterLab)",
                              code="NB_INVALID")
        if "parameters" in tags:
            tagged.append(number)
    if len(tagged) > 1:
        raise ConfigError(f"{path}: cells {', '.join(map(str, tagged))} are all tagged "
                          "`parameters`; papermill puts the given parameters after the first "
                          "one only, and the later ones would set their defaults again. Merge "
                          "them into one cell, or remove the tag from all but one",
                          code="NB_PARAMETERS_CELL")


def _notebook_kernel(nb: Notebook) -> str:
    """The kernelspec's name; python3 when there is none, or it is not a mapping (hand-edited
    or nbformat 3 notebooks), as docs/notebook-runs.md promises."""
    spec = nb.metadata.get("kernelspec")
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else DEFAULT_KERNEL


def kernel_language(kernel_dir: str) -> str:
    """The language of an installed kernel (its kernel.json), so papermill never depends on
    the notebook's own metadata to know how to write the parameters cell."""
    try:
        with open(os.path.join(kernel_dir, "kernel.json"), encoding="utf-8") as fh:
            language = json.load(fh).get("language")
    except (OSError, ValueError, AttributeError):
        language = None
    return language if isinstance(language, str) and language else "python"


def installed_kernels() -> dict[str, str]:
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager().find_kernel_specs()


def check_kernel(name: str) -> tuple[str, str]:
    kernels = installed_kernels()
    if name not in kernels:
        listing = "\n".join(f"  {k:<20} {v}" for k, v in sorted(kernels.items())) or "  (none)"
        raise ConfigError(f"kernel {name!r} is not installed; pass --kernel NAME with one of:\n"
                          f"{listing}\n(install one with: python -m ipykernel install --user "
                          f"--name NAME)", code="NB_KERNEL")
    return name, kernels[name]


def default_output(project: Path, mode: str, notebook: Path) -> Path:
    """`<project>/runs/<timestamp>-<mode>-<name>.ipynb`, never overwriting an earlier run (the
    name a run will take: `claim_output` takes it for good when the run starts)."""
    return next(p for p in _output_names(project, mode, notebook) if not p.exists())


def _output_names(project: Path, mode: str, notebook: Path) -> Iterator[Path]:
    stem = f"{datetime.now():%Y%m%d-%H%M%S}-{mode}-{notebook.stem}"
    yield project / RUNS_DIR / f"{stem}.ipynb"
    counter = 2
    while True:
        yield project / RUNS_DIR / f"{stem}-{counter}.ipynb"
        counter += 1


def claim_output(run: NotebookRun) -> NotebookRun:
    """The run with its default output name taken (created empty, O_EXCL): two runs of one
    notebook started in the same second both chose the same free name and wrote one file, the
    later save replacing the other run's notebook. A name given with --output is used as is."""
    if not run.output_default:
        return run
    run.output.parent.mkdir(parents=True, exist_ok=True)
    for path in _output_names(run.cwd, run.mode, run.notebook):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
        except FileExistsError:
            continue
        return dataclasses.replace(run, output=path, output_default=False)
    raise AssertionError("unreachable: the names never end")  # pragma: no cover


def output_written(run: NotebookRun, claimed: bool) -> bool:
    """Whether the run saved its notebook. The empty file of a `claimed` name the run never
    wrote (it stopped before papermill's first save) is removed."""
    try:
        if run.output.stat().st_size:
            return True
        if claimed and run.output.is_file():
            run.output.unlink()
            return False
    except OSError:
        return False
    return not claimed


# ------------------------------------------------------------------ executing

# the kernel's own warning about plain-TCP transport (it listens on loopback only) and its
# other startup chatter: shown with --verbose
QUIET_KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]


def execute(run: NotebookRun, *, live: bool = True, verbose: bool = False) -> NotebookResult:
    """Run the notebook with papermill; os.environ is restored when this returns.

    `live`: cell output streams to this process's stdout/stderr, and `%dist_run` inside the
    kernel streams its ranks' prefixed lines to the terminal while the notebook gets the board."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from platform_plugin.notebook.bounded import ENGINE  # (papermill)

    run = claim_output(run)
    run.output.parent.mkdir(parents=True, exist_ok=True)
    out, err = LiveStream(sys.stdout), LiveStream(sys.stderr)  # a reader gone is not a failure
    watcher = CellWatcher(run.timeout, err if live else None)
    started = time.monotonic()
    failure = None
    try:
        with swept() as tag, interruptible() as interrupts, _quiet_injected_parameter(), \
                _exported({**run.env, **tag, **({TERMINAL_ENV: "1"} if live else {})}), \
                atomic_saves(str(run.output)):
            executed = papermill.execute_notebook(
                str(run.notebook), str(run.output), parameters=run.parameters,
                kernel_name=run.kernel, language=kernel_language(run.kernel_dir),
                cwd=str(run.cwd), progress_bar=False, engine_name=ENGINE,
                stdout_file=out if live else None, stderr_file=err if live else None,
                extra_arguments=[] if verbose else QUIET_KERNEL_ARGS,
                **interrupts.engine_options(watcher.engine_options()))
    except PapermillExecutionError as error:
        if interrupts.count:  # the interrupted cell's KeyboardInterrupt, saved in the notebook
            raise KeyboardInterrupt from None
        failure = failure_from(error, watcher)
    except OutputNotSaved as exc:  # e.g. a full disk: the run stops, the last save stays
        kept = "holds the run as of its last save" if run.output.exists() else "was not written"
        what = "the output notebook" if exc.filename == str(run.output) else \
            f"a cell's whole output ({exc.filename})"  # notebook/bounded.py's file
        raise PlatformPluginError(f"{what} could not be saved ({exc.strerror}): "
                                  f"the run stopped there; {run.output} {kept}") from None
    except Exception as exc:  # a timeout or dead kernel escapes papermill's own handling
        kind = escaped_failure_kind(exc)
        if kind is None:  # e.g. the kernel did not start: nothing ran, no cell to blame
            raise PlatformPluginError(f"the notebook could not be run: {type(exc).__name__}: "
                                      f"{exc}") from exc
        if kind == FailureKind.TIMEOUT and watcher.timed_out_index is None:
            watcher.timed_out_index = watcher.current_index
        failure = record_escaped_failure(run.output, watcher, exc)
    if interrupts.count:  # the signal came as the last cell ended: the run was still stopped
        raise KeyboardInterrupt
    if failure is None and watcher.exited_at is not None:  # papermill's early stop: a success
        return NotebookResult(run, True, time.monotonic() - started, None, watcher.exited_at,
                              sum(c.cell_type == "code" for c in
                                  executed.cells[watcher.exited_at + 1:]))
    return NotebookResult(run, failure is None, time.monotonic() - started, failure)


@contextlib.contextmanager
def _exported(env: dict[str, str]) -> Iterator[None]:
    """The kernel inherits this process's environment: set the run's variables for the
    duration of the run only (not thread-safe, like any os.environ change)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _quiet_injected_parameter() -> Iterator[None]:
    """papermill warns about every parameter the notebook does not declare; `platform_mode`
    is injected into every run on purpose, so only that warning is dropped."""
    logger = logging.getLogger("papermill")

    def keep(record: logging.LogRecord) -> bool:
        return "Passed unknown parameter: platform_mode" not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


# ------------------------------------------------------------------ one call

def cleaning_for(run: NotebookRun, options: NotebookOptions
                 ) -> cleanup.PreparedCleanup | None:
    """The cleanup of CODE/ this run asks for (a full run's, unless cleanup=False), checked."""
    if not options.cleans(run.mode):
        return None
    return cleanup_before_run(run, only=options.only, keep=options.keep)


def cleanup_before_run(run: NotebookRun, *, only: Iterable[str] | None = None,
                       keep: Iterable[str] = ()) -> cleanup.PreparedCleanup:
    """Check the full run's cleanup of CODE/ (root, rules) before anything runs; the
    run's output notebook is protected."""
    try:
        root = cleanup.find_root(cwd=run.cwd)
    except ConfigError as exc:
        raise ConfigError(f"{exc}\n(a full run cleans CODE/ first: pass --no-cleanup to skip "
                          f"it)", code="NB_CLEANUP_ROOT") from exc
    return cleanup.prepare_cleanup(root, only=only, keep=keep, protect=[run.output])


@contextlib.contextmanager
def holding_code(run: NotebookRun, cleaning: cleanup.PreparedCleanup | None
                 ) -> Iterator[CleanupReport | None]:
    """Clean CODE/ first when `cleaning` (a full run), then hold the run's folder until the
    block ends (folder_locks/protocol.py), so no other cleanup removes what the notebook writes. The
    cleanup holds CODE/ exclusively and shares it without letting go: none slips in between;
    the folders around it are held (shared) before it starts. Yields the cleanup's report
    (None without one). Raises ConfigError CLEAN_ROOT_BUSY before anything is removed or
    started."""
    what = f"a {run.mode} run of {run.notebook.name}"
    cleaner = CleanupLock.take(cleaning.root, what) if cleaning else None
    try:
        with JobHold.take([run.cwd], what, besides=cleaner.paths() if cleaner else ()):
            report = cleaning.run(lock=cleaner) if cleaning else None
            if cleaner:
                cleaner.share()
            yield report
    finally:
        if cleaner:
            cleaner.release()


def run_notebook(notebook: str | os.PathLike, mode: str = "debug", *, live: bool = True,
                 **options: Any) -> NotebookResult:
    """Python API: prepare, clean CODE/ first for a full run (unless cleanup=False), run.

    `options` are the fields of `NotebookOptions` (notebook/options.py: parameters={...},
    profile=, output=, cwd=, verbose=, cleanup=, ...), as `platform-run debug|full` has them."""
    chosen = NotebookOptions(**options)
    run = prepare_run(mode, notebook, chosen)
    with holding_code(run, cleaning_for(run, chosen)):
        return execute(run, live=live, verbose=chosen.verbose)
