"""The flags several commands and magics share, declared once: `--log-dir` (sync, compare, ui,
doctor, `%dist_compare`; `launch` and `%dist_run` take it from the options record, with the same
help), the comparison's `--metric` and `--tolerance` (compare, ui, `%dist_compare`), and the
`JOB` argument of sync and compare. A number or a path is checked as it is parsed
(util/numbers.py, util/paths.py), with the flag's code, before the command does anything."""
from __future__ import annotations

import argparse

from platform_plugin.comparison.table import DEFAULT_METRIC
from platform_plugin.util.numbers import NOT_NEGATIVE, number_argument
from platform_plugin.util.paths import checked_path
from platform_plugin.variables import PLATFORM_LOG_DIR

DEFAULT_TOLERANCE = 0.1


def add_log_dir(parser: argparse.ArgumentParser) -> None:
    """`--log-dir DIR`: where jobs live (the variable and the default are the launch option's)."""
    parser.add_argument("--log-dir", metavar="DIR", type=checked_path("CLI_PATH", "--log-dir"),
                        help=PLATFORM_LOG_DIR.fallback_help(
        "where jobs live", "./platform_logs"))


def add_metric(parser: argparse.ArgumentParser, *, several: bool = True,
               help: str = "metric(s) to compare: repeat or comma-separate") -> None:
    """`--metric NAME[,NAME]`, repeatable (`metrics_of` reads it); `several=False`: one name."""
    if several:
        parser.add_argument("--metric", action="append", metavar="NAME[,NAME]",
                            help=f"{help} (default: {DEFAULT_METRIC}, else the first metric "
                                 "the ranks logged)")
    else:
        parser.add_argument("--metric", default=DEFAULT_METRIC, metavar="NAME",
                            help=f"{help} (default: {DEFAULT_METRIC})")


def metrics_of(values: list[str] | None) -> list[str]:
    """The names of a repeatable `--metric`, comma-separated or not, once each, in order; none
    when it was not given (the comparison picks one: `table.default_metric`)."""
    names = [n.strip() for value in (values or []) for n in value.split(",")
             if n.strip()]
    return list(dict.fromkeys(names))


def add_tolerance(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tolerance", default=DEFAULT_TOLERANCE,
                        type=number_argument("COMPARE_TOLERANCE", "--tolerance", bounds=NOT_NEGATIVE),
                        help="relative gap that flags a straggler or a deviating final value "
                             f"(default {DEFAULT_TOLERANCE:g})")



def add_job(parser: argparse.ArgumentParser, help: str = "job id or job folder (default: the "
            "latest job)") -> None:
    """The optional `JOB` argument: a job id or a job folder, checked as a path."""
    parser.add_argument("job", nargs="?", type=checked_path("CLI_PATH", "JOB"), help=help)
