"""`platform-run launch [options] -- COMMAND ...`: exit 0 ok, 1 job failed/stopped, 2 bad input,
130 interrupted as asked (Ctrl-C, SIGTERM, SIGHUP), as every platform-run command."""
from __future__ import annotations

import dataclasses
import gc
import signal
import sys

from platform_plugin.cli import skip_the_last_collection
from platform_plugin.errors import ConfigError
from platform_plugin.launcher.options import add_arguments, command_of, from_arguments
from platform_plugin.util.stops import INTERRUPTED_EXIT, is_interruption, raise_interrupt


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "launch", description="Start COMMAND once per rank, show every rank's output, stop all ranks at "
                    "the first failure. Example: platform-run launch --nproc 2 -- python train.py")
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    frozen = _import_uncollected()
    try:
        return _run(args)
    finally:
        if frozen:  # a caller that goes on (tests calling main()) gets its collector as it was
            gc.unfreeze()


def _import_uncollected() -> bool:
    """Import the launch path (before the ranks start) with the collector off, then freeze what
    exists: the imports make modules, classes and functions, which live as long as the process,
    so the collections they triggered freed nothing, and a collector
    switched back on would walk them all at once. True if frozen here (not when the collector was
    off or objects were frozen already: then whoever did that decides)."""
    if not gc.isenabled() or gc.get_freeze_count():
        return False
    gc.disable()
    try:
        import platform_plugin.launcher.api  # noqa: F401  (here: `launch --help` stays light)
    except BaseException:  # (Ctrl-C meanwhile, a broken install): nothing frozen
        gc.enable()
        raise
    gc.freeze()
    gc.enable()
    return True


def _run(args) -> int:
    from platform_plugin.launcher.api import run as run_job, start  # (above: collector off)
    skip_the_last_collection()  # (its docstring: the launcher closes and writes everything itself)
    options = from_arguments(args, check=False)  # a failed job is exit 1: its table is printed
    command = command_of(args)
    if options.background and not options.detach:
        raise ConfigError("--background ties the job to the process that started it, which "
                          "ends here at once: in a terminal, --detach runs a job that survives "
                          "it (`platform-run attach|jobs|stop` manage it)",
                          code="LAUNCH_BACKGROUND_TERMINAL")
    if options.detach:  # the job's id on stdout, as `docker run -d`; the notes on stderr
        job = start(command, dataclasses.replace(options, write=sys.stderr.write))
        print(job.job_id)
        return 0
    previous = {sig: signal.signal(sig, raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        result = run_job(command, options)
    except BaseException as exc:  # before the ranks started
        if not is_interruption(exc):
            raise
        print("platform-run: interrupted before the job started", file=sys.stderr)
        return INTERRUPTED_EXIT
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if result.status == "interrupted":  # the user's own stop (the table says so), not a failure
        return INTERRUPTED_EXIT
    return 0 if result.ok else 1
