"""`platform-run debug|full NOTEBOOK`: run a notebook in the debug or full-run environment."""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time

from platform_plugin.cli import HELP
from platform_plugin.cli.clean import add_cleanup_options
from platform_plugin.errors import ConfigError
from platform_plugin.launcher.display.result_table import terminal_width
from platform_plugin.notebook import run as notebook
from platform_plugin.notebook.live import LiveStream, reopen_closed_std_fds
from platform_plugin.notebook.options import NotebookOptions, add_arguments, from_arguments
from platform_plugin.notebook.run import NotebookResult, NotebookRun
from platform_plugin.notebook.save import outputs_folder
from platform_plugin.util.paths import checked_path
from platform_plugin.util.stops import INTERRUPTED_EXIT, is_interruption, raise_interrupt

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL", re.IGNORECASE)
URL_USERINFO = re.compile(r"(://)[^/@\s]+@")  # https://user:password@host -> https://***@host


def register(subparsers) -> None:
    for mode in notebook.MODES:
        parser = subparsers.add_parser(mode, help=HELP[mode], description=HELP[mode])
        parser.add_argument("notebook", metavar="NOTEBOOK", help="the .ipynb file to run")
        parser.add_argument("output_path", nargs="?", metavar="OUT.ipynb",
                            type=checked_path("NB_OUTPUT", "OUT.ipynb"),
                            help="where the executed notebook goes (as papermill's second "
                                 "argument; same as --output)")
        add_arguments(parser, mode)
        parser.add_argument("--dry-run", action="store_true",
                            help="show what would run and be cleaned; run nothing")
        parser.add_argument("--log-output", action="store_true",
                            help="accepted for papermill habits: cell output always streams "
                                 "to the terminal")
        if mode == "full":
            parser.add_argument("--no-cleanup", dest="cleanup", action="store_false",
                                help="do not clean CODE/ before the run")
            add_cleanup_options(parser)
        parser.set_defaults(func=run, mode=mode)


def _output(args: argparse.Namespace) -> str | None:
    if args.output_path and args.output and args.output_path != args.output:
        raise ConfigError(f"two output notebooks: {args.output_path} and --output {args.output}; "
                          "give one", code="NB_OUTPUT")
    return args.output_path or args.output


def run(args: argparse.Namespace) -> int:
    # from the start: a SIGTERM while CODE/ is cleaned or the kernel starts ends as Ctrl-C does
    signal.signal(signal.SIGTERM, raise_interrupt)
    reopen_closed_std_fds()  # started with stdout/stderr closed: the kernel inherits them
    sys.stderr = LiveStream(sys.stderr)  # a reader gone: run on
    options = from_arguments(args, output=_output(args), cleanup=getattr(args, "cleanup", False),
                             only=getattr(args, "only", None), keep=tuple(getattr(args, "keep", ())))
    run_spec = notebook.prepare_run(args.mode, args.notebook, options)
    cleaning = notebook.cleaning_for(run_spec, options)
    if args.dry_run:
        print(describe(run_spec))
        if cleaning:
            print(cleaning.run(dry_run=True).render(list_items=True))
        return 0
    with notebook.holding_code(run_spec, cleaning) as report:
        if report:
            print(report.render(), file=sys.stderr)
        return _execute(run_spec, options)


def _execute(run_spec: NotebookRun, options: NotebookOptions) -> int:
    claimed = run_spec.output_default
    try:  # the line inside: a Ctrl-C the moment it is shown still names the notebook (none)
        run_spec = notebook.claim_output(run_spec)  # the name printed is the one written
        print(f"[platform-run] {run_spec.mode} run of {run_spec.notebook.name} -> "
              f"{run_spec.output}", file=sys.stderr, flush=True)
        result = notebook.execute(run_spec, verbose=options.verbose)
    except BaseException as exc:  # before the first save there is no notebook to point at
        if not is_interruption(exc):
            raise
        so_far = (f"; the notebook so far: {run_spec.output}"
                  if notebook.output_written(run_spec, claimed)
                  else " before the notebook started; no output notebook was written")
        print(f"\n[platform-run] interrupted{so_far}", file=sys.stderr)
        return INTERRUPTED_EXIT
    print(summarize(result), file=sys.stderr)
    return result.exit_code


def describe(run_spec: NotebookRun) -> str:
    """The dry-run view. Values of variables whose names look secret are masked."""
    lines = [f"{run_spec.mode} run (dry run: nothing is executed)",
             f"  notebook   {run_spec.notebook}",
             f"  output     {run_spec.output}",
             f"  cwd        {run_spec.cwd}  ({_cwd_source(run_spec)})",
             f"  kernel     {run_spec.kernel}  ({run_spec.kernel_dir})",
             f"  timeout    {f'{run_spec.timeout}s per cell' if run_spec.timeout else 'none'}",
             f"  profile    {run_spec.profile or '(none)'}",
             "  parameters"]
    for name, value in run_spec.parameters.items():
        lines.append(f"    {name} = {json.dumps(value, default=str)}"
                     f"  [{run_spec.sources.get(name, '')}]")
    lines.append("  kernel environment (added)")
    for name, value in sorted(run_spec.env.items()):
        shown = "***" if SECRET_NAME.search(name) else URL_USERINFO.sub(r"\1***@", value)
        lines.append(f"    {name}={shown}")
    return "\n".join(lines)


def _cwd_source(run_spec: NotebookRun) -> str:
    """Why the kernel works there: a run starts in the notebook's folder unless --cwd says."""
    if run_spec.cwd == run_spec.notebook.parent:
        return "the notebook's folder; --cwd DIR to change"
    return "--cwd"


def summarize(result: NotebookResult) -> str:
    return _summary(result) + _long_outputs(result)


def _long_outputs(result: NotebookResult) -> str:
    """Where this run put its cells' whole long outputs (notebook/bounded.py): the notebook's
    notes say it per cell, the terminal's summary says it once (files of an earlier run with
    the same --output are older than this run and not named)."""
    folder = outputs_folder(str(result.output))
    since = time.time() - result.duration_s - 1
    try:
        cells = sorted(int(entry.name[5:-4]) for entry in os.scandir(folder)
                       if entry.name.startswith("cell-") and entry.name.endswith(".txt")
                       and entry.name[5:-4].isdigit() and entry.stat().st_mtime >= since)
    except OSError:
        return ""
    if not cells:
        return ""
    return (f"\nwhole output of cell{'s' if len(cells) > 1 else ''} "
            f"{', '.join(map(str, cells))} (kept shorter in the notebook): {folder}")


def _summary(result: NotebookResult) -> str:
    if result.ok and result.exited_at is not None:  # papermill's sys.exit(0): not a failure
        skipped = (f"{result.skipped} later code cell{'s' if result.skipped != 1 else ''} "
                   "did not run" if result.skipped else "it was the last code cell")
        return (f"[platform-run] notebook ended early at cell {result.exited_at + 1} by "
                f"sys.exit(0) in {result.duration_s:.1f}s: {skipped}\n"
                f"output notebook: {result.output}")
    if result.ok:
        return (f"[platform-run] notebook succeeded in {result.duration_s:.1f}s\n"
                f"output notebook: {result.output}")
    assert result.failure is not None  # what a run that did not succeed has
    return (result.failure.render(colors=sys.stderr.isatty(), width=terminal_width(sys.stderr))
            + f"\noutput notebook: {result.output}")
