"""`platform-run`: one subcommand per module in `platform_plugin.cli`.

Each command module exposes `register(subparsers)` (adds its parser and sets
`func=run`) and `run(args) -> int`. The registry below is the only list of commands, so a
new command is one line here plus its own module. Only the chosen command's module is
imported (`platform-run --help` imports none of them).
"""
from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import sys

from platform_plugin.errors import ConfigError, PlatformPluginError
from platform_plugin.util.folders import check_cwd
from platform_plugin.util.stops import INTERRUPTED_EXIT, is_interruption




_exit_fast = False  # gc.freeze registered at exit (once per process)


def skip_the_last_collection() -> None:
    """At the process's exit, freeze every object before the interpreter's final garbage
    collection, which then has nothing to walk. For a command whose process holds many objects
    that is seconds (`ui` and `server` import MLflow, and their exit after Ctrl-C waited for
    that collection once the server had stopped), and `launch` exits sooner too. Only
    for commands that close and write what they own explicitly (files, pipes, servers, locks):
    cyclic garbage's finalizers do not run. Registered once; in a process that goes on (tests
    calling main()), it changes nothing before its exit."""
    global _exit_fast
    if not _exit_fast:
        atexit.register(gc.freeze)
        _exit_fast = True


# (command, module that registers it, help shown in `platform-run --help`) in listing order
COMMANDS = [
    ("init", "init", "write the starter files (platform.toml, .env.example, notebook, run.sh)"),
    ("env", "env", "show the resolved platform variables and where each came from"),
    ("ranktable", "ranktable", "check, show, generate or merge HCCL rank tables"),
    ("doctor", "doctor", "check rank table, variables, running ranks and limits"),
    ("launch", "launch", "start one process per device and supervise them"),
    ("jobs", "jobs", "list this project's jobs: running, succeeded, failed, interrupted, lost"),
    ("attach", "jobs", "follow a running job (the newest by default): its board and new lines"),
    ("stop", "jobs", "stop a running job as Ctrl-C or the stop button would"),
    ("debug", "notebook", "run a notebook in the debug environment (调试环境) through papermill"),
    ("full", "notebook", "full run (全量运行): clean CODE/, then run a notebook through papermill"),
    ("clean", "clean", "remove operator caches, logs and models from CODE/"),
    ("sync", "sync", "deliver tracked params/metrics still waiting in a job's spool"),
    ("compare", "compare", "compare ranks of a job: per-rank table, straggler, plot, MLflow URL"),
    ("ui", "ui", "start a local MLflow UI on the configured store"),
    ("server", "server", "run the team's MLflow tracking server on PostgreSQL (multi-server jobs)"),
]
HELP = {name: help_text for name, _module, help_text in COMMANDS}  # the modules' help= too


class _Parser(argparse.ArgumentParser):
    """Usage errors carry a code like every other refusal (exit 2, `[CLI_USAGE]`) and the
    closest flag or command for a typo. Sub-parsers are of the same class."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # NO_ABBREVIATIONS (launcher/options.py)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        from platform_plugin.util.suggest import remember_words  # every bad flag named at once
        remember_words(self, sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        self.print_usage(sys.stderr)
        from platform_plugin.util.suggest import with_suggestions  # (difflib: a usage error only)
        self.exit(2, f"{self.prog}: error: [CLI_USAGE] {with_suggestions(self, message)}\n")


def _chosen(argv: list[str]) -> str | None:
    """The module of the sub-command named on the command line (the first word), if any."""
    modules = {name: module for name, module, _help in COMMANDS}
    for word in argv:
        if word in modules:
            return modules[word]
        if not word.startswith("-"):
            return None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with only the chosen command's module imported (`--help` imports none):
    without a chosen command, every command is a placeholder that lists its name and help."""
    parser = _Parser(
        prog="platform-run",
        description="Distributed training on the AI靶场 platform, one trustworthy step.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(sys.argv[1:] if argv is None else argv)
    for name, module, help_text in COMMANDS:
        if module != chosen:
            if chosen is None:  # a chosen command is parsed alone: no parser for the others
                sub.add_parser(name, help=help_text, add_help=False)
        elif chosen not in {m for n, m, _h in COMMANDS[:COMMANDS.index((name, module, help_text))]}:
            importlib.import_module(f"platform_plugin.cli.{module}").register(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Like parse_args, but an unknown flag is reported by the sub-command's own parser (its
    usage, its flags suggested), not by the top-level one."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        owner = parser  # the innermost sub-command named (`ranktable check --jso`: check's)
        for word in sys.argv[1:] if argv is None else argv:
            sub = next((a for a in owner._actions if isinstance(a, argparse._SubParsersAction)),
                       None)
            if sub is None:
                break
            owner = sub.choices.get(word, owner)
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser(argv)
        args = _parse(parser, argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        check_cwd("CLI_CWD_GONE")
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"platform-run: configuration error\n{exc}", file=sys.stderr)
        return exc.exit_code
    except PlatformPluginError as exc:
        print(f"platform-run: {exc}", file=sys.stderr)
        return exc.exit_code
    except BaseException as exc:  # Ctrl-C while a command was still preparing: no traceback
        if not is_interruption(exc):
            raise
        print("\nplatform-run: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
