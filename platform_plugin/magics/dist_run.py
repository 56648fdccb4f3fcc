"""`%dist_run` (line) and `%%dist_run` (cell): thin adapters over platform_plugin.launch.

    %load_ext platform_plugin
    %dist_run --nproc 2 python train.py --config '{"lr": 0.1}'
    %%dist_run --nproc 2 [-- script args]
    <the cell body is written to a .py file and run on every rank>

The line is NOT expanded by IPython (`@no_var_expand`): braces and `$` reach the command
intact, as in a shell. `--expand` as the FIRST option opts in to IPython's `$name` /
`{expr}` expansion from the notebook's variables (`$$` and `{{`/`}}` then give literal ones).
A failed job raises JobFailed in the cell (papermill marks the cell failed) after the
root-cause table has been printed; a job stopped by an interrupt of the kernel (the stop
button) raises JobInterrupted, a KeyboardInterrupt, as any interrupted cell ends. The JobResult is stored as `_dist_result` and published in
the cell's outputs as data (`JobResult.to_dict()` under JOB_RESULT_MIME): the notebook runner
reads a failed rank's root cause from there, never from the printed text.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import threading

from IPython.core.magic import line_cell_magic, magics_class, no_var_expand
from IPython.display import publish_display_data
from IPython.utils.text import DollarFormatter

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.magics import tools as magic_tools
from platform_plugin.magics.tools import MagicParser, ShellMagics, split_line
from platform_plugin.util.jobdirs import job_log_dir
from platform_plugin.launcher.api import start as start_job
from platform_plugin.launcher.jobs.handle import BackgroundJob
from platform_plugin.magics import jobs as job_magics
from platform_plugin.launcher.options import add_arguments, command_of, from_arguments, render_help
from platform_plugin.launcher.processes.result import JOB_RESULT_MIME, JobFailed, JobResult, JobStatus
from platform_plugin.util.envfile import export_mlflow_settings
from platform_plugin.util.folders import check_cwd, check_writable_folder
from platform_plugin.launcher.display.notebook_display import in_kernel
from platform_plugin.variables import PLATFORM_MLFLOW_UI_EARLY, PLATFORM_NOTEBOOK

# a notebook keeps every displayed line in the .ipynb: cap chatty ranks (logs stay complete)
NOTEBOOK_MAX_LINES_PER_S = 20.0


def _magic_only(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expand", action="store_true",
                        help="(first option only) expand $name and {expr} from the notebook's "
                        "variables")
    parser.add_argument("-h", "--help", action="store_true", help="show this help")


def _parser() -> argparse.ArgumentParser:
    parser = MagicParser(prog="%dist_run", add_help=False, code="LAUNCH_BAD_OPTION")
    add_arguments(parser)
    _magic_only(parser)
    return parser


EXAMPLES = """
examples:
  %dist_run python train.py --epochs 3              2 ranks without NPUs, else one per device
  %dist_run --nproc 8 --show all python train.py    stream every line instead of the live board
  %%dist_run --nproc 2 -- --lr 0.1                  the cell body runs on every rank (args after --)
  %dist_compare                                     the last job's ranks side by side, with a chart
  %platform_clean --dry-run                         what a full run would remove from CODE/
The last JobResult is `_dist_result`; from Python: platform_plugin.launch(cmd, **options) with
the same options as keywords (help(platform_plugin.launch)).
"""


def magic_help() -> str:
    """Every %dist_run option, generated from the options record."""
    return render_help("%dist_run", extra=_magic_only) + EXAMPLES


def _expanded(line: str, namespace: dict) -> str:
    """`--expand`: $name and {expr} from the notebook's variables. A name that is not defined,
    a lone brace or an expression that raises is a ConfigError naming the line: the user asked
    for the expansion, so the command is never run half-expanded or unexpanded."""
    try:
        return DollarFormatter().vformat(line, args=[], kwargs=namespace)
    except Exception as exc:  # noqa: BLE001 - any expression may raise anything
        raise ConfigError([Problem("LAUNCH_EXPAND", f"--expand: cannot expand "
                                   f"{line.strip()!r}: {type(exc).__name__}: {exc} (write $$ "
                                   "and {{ }} for literal ones)", "%dist_run")]) from None


def _cell_script(body: str, log_dir: str | None) -> str:
    """The cell body as a file named by its content: re-running an unchanged cell reuses it."""
    logs = job_log_dir(log_dir)  # refused as the launch would, not an OSError from makedirs
    check_writable_folder(logs, "log", "LAUNCH_LOG_DIR", "--log-dir")
    folder = os.path.join(logs, "cells")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"cell_{hashlib.sha1(body.encode()).hexdigest()[:10]}.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(body)
    return os.path.abspath(path)


@magics_class
class DistRunMagics(ShellMagics):
    @no_var_expand
    @line_cell_magic
    def dist_run(self, line: str, cell: str | None = None):
        """Run a command (line) or the cell (cell magic) once per rank (see below)."""
        __tracebackhide__ = True
        if line.lstrip().startswith("--expand"):  # opt-in, and only as the first option
            line = _expanded(line, self.user_ns)
        args = _parser().parse_args(split_line(line, "%dist_run", "LAUNCH_BAD_OPTION"))
        if args.help:
            print(magic_help())
            return None
        # as launch() refuses: the cell's script is written (relative log folder) before it
        check_cwd("LAUNCH_CWD_GONE")
        defaults: dict[str, object] = {"max_lines_per_s": NOTEBOOK_MAX_LINES_PER_S}
        if cell is not None:
            defaults["job_name"] = "cell"
        options = from_arguments(args, **{k: v for k, v in defaults.items()
                                          if getattr(args, k) is None})
        if cell is None:
            command = command_of(args)
        else:
            extra = [a for a in (args.command or []) if a != "--"]
            command = [sys.executable, _cell_script(cell, options.log_dir), *extra]
        result = None
        job_ended = threading.Event()
        _start_ui_early(options, job_ended)  # %dist_compare's page ready when the job ends
        try:
            started = start_job(command, options)
            if isinstance(started, BackgroundJob):
                if started.result is None:  # running: its board is live above, the cell is done
                    job_magics.remember(started)
                    self.user_ns["_dist_job"] = started
                    return None
                result = started.result  # (a notebook run: it ran in the foreground)
            else:
                result = started
        except JobFailed as exc:
            result = exc.result
            if result.status == JobStatus.INTERRUPTED:  # the user's own stop, not a failure
                raise JobInterrupted(f"job {result.job_id} stopped as asked: every rank ended "
                                     f"(logs: {result.job_dir})") from None
            # the table above says everything: no launcher frames in the cell's traceback
            raise exc.with_traceback(None) from None
        finally:
            job_ended.set()
            self.user_ns["_dist_result"] = result
            if result is not None:
                _publish(result)
        return None


DistRunMagics.dist_run.__doc__ = (
    "Run a command (line magic) or the cell (cell magic) once per rank.\n\n" + magic_help())


class JobInterrupted(KeyboardInterrupt):
    """The cell's end after the stop button (or another interrupt of the kernel): an interrupted
    cell as Jupyter shows any, one line without the magic's frames (the table above says the
    rest)."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


def _start_ui_early(options, job_ended: threading.Event) -> None:
    """A tracked job into a local store (sqlite beside CODE/): its MLflow UI starts while the
    job runs, at low priority, once per kernel (comparison/jupyter_ui.start_early), unless
    PLATFORM_MLFLOW_UI_EARLY=0. A tracking server has its own page: nothing to start. Nor in a
    notebook run (papermill: nobody opens the page, and the UI ends with the run's kernel)."""
    if options.tracking == "none" or PLATFORM_MLFLOW_UI_EARLY.get() == "0" \
            or PLATFORM_NOTEBOOK.is_set() or not in_kernel():
        return
    from platform_plugin.comparison.jupyter_ui import start_early
    from platform_plugin.tracking.sinks.mlflow_sink import default_tracking_uri
    cwd = options.cwd or os.getcwd()
    environ = dict(os.environ)
    export_mlflow_settings(cwd, environ)  # the .env's MLFLOW_TRACKING_URI, as the job's
    uri = default_tracking_uri(cwd, environ)
    if not uri.startswith(("http://", "https://")):
        start_early(uri, job_ended)


def _publish(result: JobResult) -> None:
    """The result as data in the cell's outputs (no text/plain: nothing is shown for it)."""
    publish_display_data({JOB_RESULT_MIME: result.to_dict()})


def register(ipython) -> None:
    ipython.register_magics(DistRunMagics)
    magic_tools.register(ipython)
    job_magics.register(ipython)
