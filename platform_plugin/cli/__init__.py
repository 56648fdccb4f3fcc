"""`platform-run`: one subcommand per module in `platform_plugin.cli`.

Each command module exposes `register(subparsers)` (adds its parser and sets
`func=run`) and `run(args) -> int`. The registry below is the only list of commands, so a
new command is one line here plus its own module.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from platform_plugin.errors import ConfigError, PlatformPluginError

# (command module, help shown in `platform-run --help`) in the order they are listed
COMMANDS = [
    ("env", "show the resolved platform variables and where each came from"),
    ("ranktable", "check, show, generate or merge HCCL rank tables"),
    ("doctor", "check rank table, variables, running ranks and limits"),
    ("launch", "start one process per device and supervise them"),
    ("notebook", "run a notebook in the debug or full-run environment"),
    ("clean", "remove operator caches, logs and models from CODE/"),
    ("sync", "deliver tracked params/metrics still waiting in a job's spool"),
    ("compare", "compare ranks of a job: per-rank table, straggler, plot, MLflow URL"),
    ("ui", "start a local MLflow UI on the configured store"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="platform-run",
        description="Distributed training on the AI靶场 platform, one trustworthy step.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, _help in COMMANDS:
        try:
            module = importlib.import_module(f"platform_plugin.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"platform_plugin.cli.{name}":
                raise
            continue  # command not built yet
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"platform-run: configuration error\n{exc}", file=sys.stderr)
        return exc.exit_code
    except PlatformPluginError as exc:
        print(f"platform-run: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
