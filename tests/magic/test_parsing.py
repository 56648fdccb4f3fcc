"""The magics' lines as a hostile user types them: an unclosed quote or an `--expand` that
cannot be expanded is a ConfigError with a code, shown as one block, and nothing starts.
(A real in-process IPython shell: parsing needs no kernel.)"""
from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from platform_plugin.errors import ConfigError


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "platform_plugin")
    yield ip
    InteractiveShell.clear_instance()


def refused(shell, capsys, tmp_path, cell: str, code: str) -> str:
    result = shell.run_cell(cell.replace("LOGS", str(tmp_path / "logs")))
    shown = capsys.readouterr().out
    assert isinstance(result.error_in_exec, ConfigError), (result.error_in_exec, shown)
    assert f"[{code}]" in str(result.error_in_exec)
    assert "Traceback" not in shown and "shlex.py" not in shown, shown
    assert not (tmp_path / "logs").exists()  # nothing was created
    return str(result.error_in_exec)


@pytest.mark.parametrize("cell", [
    "%dist_run --log-dir LOGS python -c 'print(1)",
    '%dist_run --log-dir LOGS python -c "print(1)',
    "%%dist_run --log-dir LOGS -- --name 'x\nprint(1)",
])
def test_an_unclosed_quote_in_dist_run_is_a_clean_refusal(shell, capsys, tmp_path, cell):
    assert "No closing quotation" in refused(shell, capsys, tmp_path, cell, "LAUNCH_BAD_OPTION")


@pytest.mark.parametrize("magic", ["%dist_compare 'job", "%platform_clean --root 'CODE"])
def test_an_unclosed_quote_in_the_other_magics_is_a_clean_refusal(shell, capsys, tmp_path,
                                                                   magic):
    refused(shell, capsys, tmp_path, magic, "MAGIC_BAD_OPTION")


@pytest.mark.parametrize("cell, why", [
    ("%dist_run --expand --log-dir LOGS python train.py --lr {no_such_name}", "NameError"),
    ("%dist_run --expand --log-dir LOGS python -c 'd = {'", "ValueError"),
    ("%dist_run --expand --log-dir LOGS python train.py {1/0}", "ZeroDivisionError"),
])
def test_an_expansion_that_fails_is_a_clean_refusal(shell, capsys, tmp_path, cell, why):
    assert why in refused(shell, capsys, tmp_path, cell, "LAUNCH_EXPAND")


def test_a_good_expansion_still_reaches_the_options(shell, capsys, tmp_path):
    shell.user_ns["bad_nproc"] = 0
    message = refused(shell, capsys, tmp_path,
                      "%dist_run --expand --nproc {bad_nproc} --log-dir LOGS python x.py",
                      "LAUNCH_NPROC")
    assert "--nproc" in message


@pytest.mark.parametrize("log_dir, code", [("/proc/no-such-folder", "LAUNCH_LOG_DIR_READONLY"),
                                           ("/dev/null/x", "LAUNCH_LOG_DIR_NOT_DIR")])
def test_a_cell_magic_with_an_unusable_log_dir_is_a_clean_refusal(shell, capsys, tmp_path,
                                                                  log_dir, code):
    """The cell's script is written under the log folder first: that was a FileNotFoundError /
    NotADirectoryError traceback."""
    refused(shell, capsys, tmp_path, f"%%dist_run --log-dir {log_dir} --nproc 1\nprint(1)\n",
            code)


@pytest.mark.parametrize("value", ["nan", "-1"])
def test_dist_compare_refuses_a_tolerance_that_flags_nothing_or_everything(shell, capsys,
                                                                           tmp_path, value):
    refused(shell, capsys, tmp_path, f"%dist_compare --log-dir LOGS --tolerance {value}",
            "COMPARE_TOLERANCE")


def test_dist_compare_takes_the_cli_compare_flags():
    """`--metric` repeatable and comma-separated, `--tolerance` and `--log-dir`: the declarations
    of `platform-run compare` (cli/flags.py)."""
    from platform_plugin.cli.flags import metrics_of
    from platform_plugin.magics.tools import _compare_parser

    args = _compare_parser().parse_args(["job", "--metric", "loss,acc", "--metric", "loss",
                                         "--tolerance", "0.2", "--log-dir", "L", "--no-ui"])
    assert metrics_of(args.metric) == ["loss", "acc"]
    assert (args.job, args.tolerance, args.log_dir, args.ui) == ("job", 0.2, "L", False)
    # none asked for: compare picks loss, else the first metric the ranks logged (and says so)
    assert metrics_of(_compare_parser().parse_args([]).metric) == []
