"""`platform-run`: one subcommand per module in `platform_plugin.cli`.

Each command module exposes `register(subparsers)` (adds its parser and sets
`func=run`) and `run(args) -> int`. The registry below is the only list of commands, so a
new command is one line here plus its own module. Only the chosen command's module is
imported (`platform-run --help` imports none of them): start-up stays fast.
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


# words that run a command module of another name (the notebook module registers both)
ALIASES = {"debug": "notebook", "full": "notebook"}


class _Parser(argparse.ArgumentParser):
    """Usage errors carry a code like every other refusal (exit 2, `[CLI_USAGE]`)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: [CLI_USAGE] {message}\n")


def _chosen(argv: list[str]) -> str | None:
    """The sub-command named on the command line (the first word that is one), if any."""
    names = {name for name, _help in COMMANDS}
    for word in argv:
        if word in ALIASES:
            return ALIASES[word]
        if word in names:
            return word
        if not word.startswith("-"):
            return None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with only the chosen command's module imported (`--help` imports none):
    every other command is a placeholder that lists its name and help."""
    parser = _Parser(
        prog="platform-run",
        description="Distributed training on the AI靶场 platform, one trustworthy step.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(sys.argv[1:] if argv is None else argv)
    for name, help_text in COMMANDS:
        if name == chosen:
            importlib.import_module(f"platform_plugin.cli.{name}").register(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"platform-run: configuration error\n{exc}", file=sys.stderr)
        return exc.exit_code
    except PlatformPluginError as exc:
        print(f"platform-run: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
