"""`%dist_compare [JOB]` and `%platform_clean [--dry-run]`: the CLI's compare and clean, in the
cell where the user already is.

    %dist_compare                 # the latest job: per-rank table, chart, MLflow page (IFrame)
    %dist_compare JOB --metric acc --metric loss   # (or --metric acc,loss) one table each
    %platform_clean --dry-run     # what the full run (全量运行) would remove from CODE/
    %platform_clean               # clean now, before clicking the platform's full-run button
"""
from __future__ import annotations

import argparse
import os
import shlex
from contextlib import contextmanager
from pathlib import Path
from stat import S_ISREG

from IPython.core.magic import Magics, line_magic, magics_class

from platform_plugin.cleanup import run as cleanup
from platform_plugin.cleanup.run import human_bytes
from platform_plugin.cli.clean import add_arguments
from platform_plugin.cli.flags import add_job, add_log_dir, add_metric, add_tolerance, metrics_of
from platform_plugin.comparison.view import compare
from platform_plugin.errors import ConfigError, Problem
from platform_plugin.util.folders import check_cwd
from platform_plugin.util.suggest import remember_words, with_suggestions


class MagicParser(argparse.ArgumentParser):
    """The parser of every magic. argparse would sys.exit() and kill the cell: a bad line is a
    ConfigError with `code` (one block), at the magic's name (`[CODE] at %dist_run: ...`)."""

    def __init__(self, *args, code: str = "MAGIC_BAD_OPTION", **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # NO_ABBREVIATIONS (launcher/options.py)
        super().__init__(*args, **kwargs)
        self.code = code

    def parse_known_args(self, args=None, namespace=None):
        remember_words(self, args)  # every bad flag of the line named at once (util/suggest.py)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        text = with_suggestions(self, message)
        raise ConfigError([Problem(self.code, f"{text}\n"
                                   f"  (`{self.prog} --help` lists every option)", self.prog)])

    def exit(self, status=0, message=None):  # --help printed its text: end the magic, not the kernel
        if message:
            print(message)
        raise _HelpShown()


class _HelpShown(Exception):
    pass


def split_line(line: str, prog: str, code: str) -> list[str]:
    """The magic's line split as a shell would; an unclosed quote (shlex's ValueError) is a
    ConfigError naming the magic, not a traceback of shlex's frames."""
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise ConfigError([Problem(code, f"{prog} {line.strip()}: {exc} (close the quote, or "
                                   f"escape it with a backslash)", prog)]) from None


def _compare_parser() -> MagicParser:
    parser = MagicParser(prog="%dist_compare", description="The ranks of a job side by side: "
                         "per-rank table, a chart of every rank's curve, the MLflow page.")
    add_job(parser, help="job id or folder (default: the latest job)")
    add_metric(parser)
    add_tolerance(parser)
    add_log_dir(parser)
    parser.add_argument("--no-ui", dest="ui", action="store_false",
                        help="no MLflow UI (table and chart only)")
    return parser


def _clean_parser() -> MagicParser:
    parser = MagicParser(prog="%platform_clean", description="Remove operator caches, logs and "
                         "models from CODE/ by the same rules as `platform-run clean` (and the "
                         "full run). Source, notebooks, .env, platform.toml, .git/ are kept.")
    add_arguments(parser)
    return parser


def folder_size(root: Path) -> int:
    """Bytes of the regular files under `root` (symlinks are not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                stat = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            total += stat.st_size if S_ISREG(stat.st_mode) else 0
    return total


def parsed(parser, line: str, magic: str):
    """The magic's options, or None when `--help` was shown. The current folder must still
    exist, as the `platform-run` command of the same name refuses otherwise."""
    __tracebackhide__ = True
    try:
        args = parser.parse_args(split_line(line, magic, "MAGIC_BAD_OPTION"))
    except _HelpShown:
        return None
    check_cwd("CLI_CWD_GONE")
    return args


class ShellMagics(Magics):
    """The magics' base: `user_ns`, the notebook's namespace their results are left in."""

    @property
    def user_ns(self) -> dict:
        assert self.shell is not None  # magics run only once registered with a shell
        return self.shell.user_ns


@magics_class
class PlatformMagics(ShellMagics):
    @line_magic
    def dist_compare(self, line: str):
        """Compare the ranks of a job (default: the latest). `%dist_compare --help` for options."""
        __tracebackhide__ = True
        with _headline("nothing was compared", "%dist_compare stopped: nothing was compared "
                       "(run it again; the job and its runs are untouched)"):
            args = parsed(_compare_parser(), line, "%dist_compare")
            if args is None:
                return None
            metrics: list[str | None] = [*metrics_of(args.metric)] or [None]  # None: the default
            compared = [compare(args.job, metric, log_dir=args.log_dir, tolerance=args.tolerance,
                                ui=args.ui) for metric in metrics]
            # one metric: its Comparison; several: the list, in the order given
            self.user_ns["_dist_compare"] = compared[0] if len(compared) == 1 else compared
        return None

    @line_magic
    def platform_clean(self, line: str):
        """Clean CODE/ as a full run would; `--dry-run` lists what would go. `--help` for more."""
        __tracebackhide__ = True
        with _headline("nothing was removed", "%platform_clean stopped: what it removed before "
                       "the stop is gone, the rest is kept (`%platform_clean --dry-run` shows "
                       "what is left)"):
            self._clean(line)

    def _clean(self, line: str) -> None:
        __tracebackhide__ = True
        args = parsed(_clean_parser(), line, "%platform_clean")
        if args is None:
            return None
        root = cleanup.find_root(args.root)
        before = folder_size(root)
        report = cleanup.clean(root, only=args.only, keep=args.keep, dry_run=args.dry_run,
                               progress=False, checkpoints=args.checkpoints)
        print(report.render(list_items=args.dry_run or args.list_items))
        after = before - sum(size for _files, size in report.totals().values()) \
            if args.dry_run else folder_size(root)
        print(f"size of {root}: {human_bytes(before)} before, {human_bytes(after)} "
              f"{'after a real run' if args.dry_run else 'after'}")
        self.user_ns["_platform_clean"] = report
        return None


@contextmanager
def _headline(text: str, interrupted: str | None = None):
    """A refusal inside this magic says what did not happen ("ConfigError: nothing was started"
    above a busy CODE/ folder or a typo'd option of %platform_clean was wrong). `interrupted`:
    the one line the stop button leaves (the first %dist_compare imports MLflow and starts its
    UI, ~15 s: a stop there printed a KeyboardInterrupt through 20 frames of plugin, MLflow and
    SQLAlchemy imports; a stop of a long %platform_clean one through the walk and the remover)."""
    try:
        yield
    except ConfigError as exc:
        exc.headline = text
        raise
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        raise _Interrupted(interrupted).with_traceback(None) from None


class _Interrupted(KeyboardInterrupt):
    """The stop button inside a tool magic: still a KeyboardInterrupt (papermill, the notebook
    runner see one), shown as its one line."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mKeyboardInterrupt\x1b[0m: {self}"]


def register(ipython) -> None:
    ipython.register_magics(PlatformMagics)
