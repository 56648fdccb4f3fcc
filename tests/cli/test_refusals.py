"""Bad input is a clean refusal: exit 2, an error code, nothing created (in-process CLI runs;
the corpus in test_fuzz_corpus.py runs many more, and a sample as real subprocesses)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from tests.cli.helpers import run_inprocess, run_subprocess
from tests.helpers import clean_env, terminal_sigint
from tests.ranktable.samples import TABLE_4P, sample, write_json

BIG = "9" * 5000  # over Python's 4,300-digit int() limit


@pytest.fixture
def cwd(tmp_path, clean_environ):
    clean_environ.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def refused(outcome, code: str) -> None:
    assert outcome.refused_cleanly(), outcome
    assert f"[{code}" in outcome.text, outcome.text


def test_ui_port_out_of_range_is_refused_at_once(cwd):
    refused(run_inprocess(["ui", "--port", "99999"], cwd), "UI_PORT")


def test_ui_port_in_use_is_refused_before_the_server_starts(cwd):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        refused(run_inprocess(["ui", "--port", str(busy.getsockname()[1])], cwd),
                "LAUNCH_PORT_BUSY")


def test_ui_default_store_is_the_jobs_store_beside_code_as_its_help_says(cwd, monkeypatch):
    from platform_plugin.cli.ui import store_uri
    inside = cwd / "CODE" / "exp1"
    inside.mkdir(parents=True)
    monkeypatch.chdir(inside)
    assert store_uri(None) == f"sqlite:///{cwd / 'mlflow.db'}"
    help_text = run_inprocess(["ui", "--help"], cwd).text
    assert "beside the CODE/ folder" in help_text and "sqlite:///./mlflow.db" not in help_text


def test_compare_of_an_unknown_job_without_a_store_creates_no_store(cwd):
    refused(run_inprocess(["compare", "train-20260101-000000-abcd"], cwd), "TRACKING_JOB")


@pytest.mark.parametrize("where", ["rank_id", "device_id", "server_count"])
def test_rank_table_with_a_5000_digit_integer(cwd, where):
    doc = sample(TABLE_4P)
    if where == "server_count":
        doc["server_count"] = BIG
    else:
        doc["server_list"][0]["device"][0][where] = BIG
    table = write_json(cwd / "t.json", doc)
    refused(run_inprocess(["ranktable", "check", str(table)], cwd), "RT_NOT_INTEGER")
    shown = run_inprocess(["ranktable", "show", str(table)], cwd)  # shows what it can read
    assert shown.rc in (0, 2) and "RT_NOT_INTEGER" in shown.text and not shown.traceback
    cwd.joinpath(".env").write_text(f"RANK_TABLE_FILE={table}\n")
    refused(run_inprocess(["env"], cwd), "RT_NOT_INTEGER")
    refused(run_inprocess(["launch", "--", "python", "-c", "pass"], cwd), "RT_NOT_INTEGER")
    doctor = run_inprocess(["doctor"], cwd)
    assert doctor.rc in (0, 1, 2) and not doctor.traceback and "RT_NOT_INTEGER" in doctor.text


@pytest.mark.parametrize("name", ["RANK_START", "RANK_ID", "RANK_SIZE", "DEVICE_ID"])
def test_env_file_with_a_5000_digit_integer(cwd, name):
    cwd.joinpath(".env").write_text(f"{name}={BIG}\n")
    refused(run_inprocess(["env"], cwd), "ENV_NOT_INTEGER")
    refused(run_inprocess(["launch", "--nproc", "1", "--", "true"], cwd), "ENV_NOT_INTEGER")


def test_env_file_with_a_nul_byte(cwd):
    cwd.joinpath(".env").write_bytes(b"A=1\nB=x\0y\n")
    refused(run_inprocess(["env"], cwd), "ENV_FILE_NUL")
    refused(run_inprocess(["launch", "--nproc", "1", "--", "true"], cwd), "ENV_FILE_NUL")


@pytest.mark.parametrize("line", ["=5", 'MS_D="unterminated', "MS_E ? 1"])
def test_env_file_with_a_line_dotenv_cannot_parse(cwd, line):
    """Before: python-dotenv logged 'could not parse statement starting at line 2' and the
    launch went on without the variable (and every variable the broken quote swallowed)."""
    cwd.joinpath(".env").write_text(f"MS_A=1\n{line}\nMS_B=2\n")
    for argv in (["env"], ["launch", "--nproc", "1", "--", "true"]):
        outcome = run_inprocess(argv, cwd)
        refused(outcome, "ENV_FILE_SYNTAX")
        assert "line 2: cannot parse" in outcome.text


@pytest.mark.parametrize("size, code", [(200 * 1024, "ENV_VALUE_TOO_LONG"),
                                        (4 << 20, "ENV_FILE_TOO_LARGE")])
def test_env_file_with_a_value_no_process_can_take(cwd, size, code):
    cwd.joinpath(".env").write_text("BLOB=" + "a" * size + "\n")
    refused(run_inprocess(["launch", "--nproc", "1", "--", "true"], cwd), code)


def test_a_300_character_job_name(cwd):
    refused(run_inprocess(["launch", "--nproc", "1", "--job-name", "j" * 300, "--", "true"],
                          cwd), "LAUNCH_JOB_NAME")


def test_a_90_character_chinese_job_name_is_too_long_for_a_folder(cwd):
    """270 bytes in UTF-8 (a folder name holds 255): refused before anything exists, not an
    ENAMETOOLONG traceback once Chinese names were kept."""
    refused(run_inprocess(["launch", "--nproc", "1", "--job-name", "训" * 90, "--", "true"],
                          cwd), "LAUNCH_JOB_NAME")


@pytest.mark.parametrize("how, code", [
    ("--log-dir", "LAUNCH_LOG_DIR_NOT_DIR"), ("PLATFORM_LOG_DIR", "LAUNCH_LOG_DIR_NOT_DIR"),
    ("--cache-dir", "LAUNCH_CACHE_DIR_NOT_DIR"),
    ("--checkpoint-dir", "LAUNCH_CHECKPOINT_DIR_NOT_DIR"),
    ("PLATFORM_CHECKPOINT_DIR", "LAUNCH_CHECKPOINT_DIR_NOT_DIR")])
def test_a_folder_option_that_is_a_file(cwd, clean_environ, how, code):
    cwd.joinpath("afile").write_text("x")
    args = ["launch", "--nproc", "1", "--", "true"]
    if how.startswith("PLATFORM_"):
        clean_environ.setenv(how, str(cwd / "afile"))
    else:
        args[1:1] = [how, "afile/sub"]
    refused(run_inprocess(args, cwd), code)


@pytest.mark.parametrize("program, code", [
    ("no-such-program-xyz", "LAUNCH_PROGRAM_MISSING"),
    ("./missing.sh", "LAUNCH_PROGRAM_MISSING"),
    ("./not_executable.sh", "LAUNCH_PROGRAM_NOT_EXECUTABLE"),
    ("./empty.sh", "LAUNCH_PROGRAM_EMPTY"),
    ("./a_folder", "LAUNCH_PROGRAM_NOT_EXECUTABLE"),
    ("missing_script.py", "LAUNCH_SCRIPT_MISSING"),
])
def test_a_program_that_cannot_run_is_refused_before_the_job_exists(cwd, program, code):
    cwd.joinpath("not_executable.sh").write_text("#!/bin/sh\necho hi\n")
    cwd.joinpath("empty.sh").write_text("")
    cwd.joinpath("empty.sh").chmod(0o755)
    cwd.joinpath("a_folder").mkdir()
    # default tracking: a refused job must not leave an MLflow store or runs behind either
    refused(run_inprocess(["launch", "--nproc", "2", "--", program], cwd), code)


def test_a_program_is_found_through_the_ranks_path(cwd, clean_environ):
    """Resolved like the spawn does: PATH of the ranks (the .env may extend it)."""
    bin_dir = cwd / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "mytool"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    PLATFORM_CACHE_DIR=str(cwd / "cache"))
    ok = run_subprocess(["launch", "--nproc", "1", "--tracking", "none", "--", "mytool"], cwd, env)
    assert ok.rc == 0 and "tool ran" in ok.text, ok


def test_notebook_bad_inputs(cwd):
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": "python3"},
          "cells": [{"cell_type": "code", "metadata": {}, "source": "x = 1", "outputs": [],
                     "execution_count": None, "id": "a"}]}
    (cwd / "nb.ipynb").write_text(json.dumps(nb))
    (cwd / "afile").write_text("x")
    refused(run_inprocess(["debug", "nb.ipynb", "--timeout", "nan"], cwd), "NB_TIMEOUT")
    refused(run_inprocess(["debug", "nb.ipynb", "--output", "afile/out.ipynb"], cwd),
            "NB_OUTPUT_DIR_NOT_DIR")
    refused(run_inprocess(["debug", "nb.ipynb", "--output", "/proc/no/out.ipynb"], cwd),
            "NB_OUTPUT_DIR_READONLY")
    dry = run_inprocess(["debug", "nb.ipynb", "--dry-run"], cwd)  # string kernelspec: python3
    assert dry.rc == 0 and "python3" in dry.text, dry


@pytest.mark.slow
@pytest.mark.parametrize("metadata", ["v3"])  # a string kernelspec: the dry run above
def test_notebooks_without_a_usable_kernelspec_run_with_python3(tmp_path, metadata):
    """The documented fallback: no kernelspec, a string one, or nbformat 3 -> python3."""
    source = "print('value', x)"
    if metadata == "v3":
        doc = {"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": "old"}, "worksheets": [
            {"cells": [{"cell_type": "code", "input": "x = 1", "language": "python",
                        "outputs": [], "metadata": {"tags": ["parameters"]}},
                       {"cell_type": "code", "input": source, "language": "python",
                        "outputs": [], "metadata": {}}]}]}
    else:
        cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "x = 1",
                  "outputs": [], "execution_count": None, "id": "p"},
                 {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
                  "execution_count": None, "id": "b"}]
        doc = {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata, "cells": cells}
    (tmp_path / "nb.ipynb").write_text(json.dumps(doc))
    done = run_subprocess(["debug", "nb.ipynb", "-p", "x", "5", "--output", "out.ipynb"],
                          tmp_path, hang_s=180)  # a real kernel runs the notebook
    assert done.rc == 0, done
    assert "value 5" in (tmp_path / "out.ipynb").read_text()


def test_a_missing_program_is_refused_whatever_the_backend(cwd):
    for backend in ("torch", "ms-cluster", "plain"):
        refused(run_inprocess(["launch", "--nproc", "2", "--backend", backend, "--",
                               "no-such-program-xyz"], cwd), "LAUNCH_PROGRAM_MISSING")


@pytest.mark.parametrize("store, code", [
    ("bogus://x", "UI_STORE"), ("sqlite:////proc/no-such-folder/mlflow.db", "UI_STORE_READONLY"),
    ("sqlite:///afile/mlflow.db", "UI_STORE_NOT_DIR")])
def test_ui_store_mlflow_cannot_open_is_refused_before_the_server_starts(cwd, store, code):
    cwd.joinpath("afile").write_text("x")
    refused(run_inprocess(["ui", "--port", "0", "--store", store], cwd), code)


@pytest.fixture
def reachable(cwd):
    """A folder the `postgres` user can enter (pytest's tmp is closed to it)."""
    root = tempfile.mkdtemp(prefix="platform-refusal-")
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root)


@pytest.mark.parametrize("argv, code", [
    (["--pg-port", "99999"], "SERVER_PG_PORT"), (["--pg-port", "-1"], "SERVER_PG_PORT"),
    (["--data-dir", "/proc/no-such-folder/server"], "SERVER_DATA_DIR_READONLY"),
    (["--data-dir", ""], "SERVER_DATA_DIR"),  # was /var/lib/platform_plugin/server: initdb there
    (["--workers", "1_0"], "SERVER_WORKERS"), (["--port", "+5000"], "SERVER_PORT"),
    (["--data-dir", "{root}/afile/server"], "SERVER_DATA_DIR_NOT_DIR"),
    (["--artifacts", "/proc/no-such-folder/artifacts"], "SERVER_ARTIFACTS_READONLY")])
def test_server_flags_are_refused_before_any_cluster_or_folder_exists(cwd, reachable, argv,
                                                                      code):
    with open(os.path.join(reachable, "afile"), "w") as fh:
        fh.write("x")
    argv = [a.format(root=reachable) for a in argv]
    data = [] if "--data-dir" in argv else ["--data-dir", os.path.join(reachable, "server")]
    refused(run_inprocess(["server", "--port", "0", *data, *argv], cwd), code)
    assert os.listdir(reachable) == ["afile"]  # no cluster, no artifacts folder


def test_server_pg_port_in_use_where_postgres_listens_is_refused_before_the_cluster(cwd, reachable):
    import socket

    from platform_plugin.tracking.server.postgres import HOST
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        outcome = run_inprocess(["server", "--port", "0", "--pg-port", str(port), "--data-dir",
                                 os.path.join(reachable, "server")], cwd)
    refused(outcome, "LAUNCH_PORT_BUSY")
    assert f"--pg-port {port} on {HOST} is in use" in outcome.text
    assert os.listdir(reachable) == []


@pytest.mark.parametrize("kind", ["fifo", "folder", "too-large"])
def test_rank_table_that_is_no_regular_file_or_too_large_is_refused_at_once(cwd, kind):
    """A FIFO without a writer blocked open() forever; a 65 MiB file (over the 64 MiB limit)
    was read whole."""
    table = cwd / "t.json"
    if kind == "fifo":
        os.mkfifo(table)
    elif kind == "folder":
        table.mkdir()
    else:
        with open(table, "wb") as fh:  # sparse: costs no disk
            fh.truncate(65 << 20)
    code = "RT_FILE_TOO_LARGE" if kind == "too-large" else "RT_FILE_NOT_REGULAR"
    refused(run_inprocess(["ranktable", "check", str(table)], cwd), code)
    cwd.joinpath(".env").write_text(f"RANK_TABLE_FILE={table}\n")
    refused(run_inprocess(["launch", "--tracking", "none", "--", "true"], cwd), code)


def test_sync_wait_that_is_not_a_number_of_seconds_is_refused(cwd):
    refused(run_inprocess(["sync", "--wait", "nan"], cwd), "TRACKING_SYNC_WAIT")


def test_ctrl_c_while_a_command_waits_is_exit_130_without_a_traceback(cwd):
    """`ranktable check --wait` polls a table still "initializing"; Ctrl-C there was a
    KeyboardInterrupt traceback out of time.sleep."""
    import signal
    import subprocess
    import sys

    write_json(cwd / "t.json", {**sample(TABLE_4P), "status": "initializing"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "platform_plugin", "ranktable", "check", "--wait", "60", "t.json"],
        cwd=cwd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=terminal_sigint)  # as a terminal's
    try:
        for _ in range(300):  # the poll loop has started once the parser's imports are done
            if proc.poll() is not None or _sleeping(proc.pid):
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    assert "platform-run: interrupted" in err and "Traceback" not in err


def _sleeping(pid: int) -> bool:
    """The process sits in a sleep (the poll's time.sleep), not importing."""
    with open(f"/proc/{pid}/wchan") as fh:
        return fh.read() in ("hrtimer_nanosleep", "do_nanosleep")


def test_ranktable_generate_with_a_fifo_as_hccn_conf_is_refused_at_once(cwd):
    """The FIFO blocked `generate` forever (and /dev/zero read until memory ran out)."""
    os.mkfifo(cwd / "hccn.conf")
    refused(run_inprocess(["ranktable", "generate", "--devices", "0-1", "--hccn-conf",
                           str(cwd / "hccn.conf"), "--server-ip", "10.0.0.9"], cwd),
            "RT_HCCN_MISSING")


def test_notebook_output_that_is_a_folder_is_refused_before_the_kernel(cwd):
    """It ran the notebook, then failed to save: 'Is a directory'."""
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(), cwd / "nb.ipynb")
    (cwd / "adir").mkdir()
    refused(run_inprocess(["debug", "nb.ipynb", "--output", "adir", "--dry-run"], cwd),
            "NB_OUTPUT")


@pytest.mark.parametrize("name, content", [
    ("sink.json", "["), ("sink.json", '{"layout": "runs"}'), ("end.json", '{"status": "x"}'),
    ("rank_0.state.json", "\xff")])
def test_a_damaged_tracking_state_file_is_refused_by_sync_and_compare(cwd, name, content):
    """A torn or hand-edited state file was a JSONDecodeError/TypeError/KeyError traceback."""
    tracking = cwd / "platform_logs" / "train-20260101-000000-abcd" / "tracking"
    tracking.mkdir(parents=True)
    sink = {"sink": "mlflow", "tracking_uri": f"sqlite:///{cwd / 'mlflow.db'}",
            "ranks": {"rank_0": {}}}
    (tracking / "sink.json").write_text(json.dumps(sink))
    (tracking / "rank_0.jsonl").write_text("")
    (tracking / name).write_bytes(content.encode("latin-1"))
    job = "train-20260101-000000-abcd"
    commands = [["sync", job, "--wait", "0"]] + ([["compare", job]] if name != "end.json" else [])
    for argv in commands:  # (compare never reads end.json)
        outcome = run_inprocess(argv, cwd)
        assert outcome.rc == 2 and not outcome.traceback, outcome
        assert "[TRACKING_STATE_DAMAGED]" in outcome.text and name in outcome.text, outcome.text


@pytest.mark.parametrize("value", ["", ",,", " "])
def test_clean_only_naming_no_category_is_refused_not_read_as_all(cwd, value):
    """`--only "$CATS"` with an empty variable used to clean every category."""
    (cwd / "train.py").write_text("")
    (cwd / "old.log").write_text("keep me")
    refused(run_inprocess(["clean", "--root", str(cwd), "--only", value], cwd), "CLI_USAGE")
    assert (cwd / "old.log").exists()


@pytest.mark.parametrize("argv, code", [
    (["init", "/proc/no-such-folder/project"], "INIT_DIR_READONLY"),
    (["init", "afile/project"], "INIT_DIR_NOT_DIR"),
    (["init", "afile"], "INIT_DIR_NOT_DIR"),
    (["compare", "--tolerance", "nan"], "COMPARE_TOLERANCE"),
    (["compare", "--tolerance", "-1"], "COMPARE_TOLERANCE"),
    (["compare", "--plot", "/proc/no-such-folder/p.png"], "COMPARE_PLOT_READONLY")])
def test_init_and_compare_refuse_what_they_cannot_do_before_any_work(cwd, argv, code):
    """init into /proc and compare --plot into it were tracebacks (compare's after all its
    work); --tolerance nan flagged no straggler ever."""
    (cwd / "afile").write_text("x")
    refused(run_inprocess(argv, cwd), code)


def test_notebook_parameters_too_big_for_the_kernel_are_refused_before_it(cwd):
    """An alias bomb took 22 s and 1.8 GB at 8 levels (more: out of memory); a 200 KiB value
    made PLATFORM_NOTEBOOK_PARAMETERS too long for the kernel's execve."""
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(), cwd / "nb.ipynb")
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdef", "bcdefg")]
    (cwd / "bomb.yaml").write_text("\n".join(lines) + "\n")  # 9**7 = 4.8 million strings
    refused(run_inprocess(["debug", "nb.ipynb", "--dry-run", "-f", "bomb.yaml"], cwd),
            "NB_PARAMS")
    refused(run_inprocess(["debug", "nb.ipynb", "--dry-run", "-p", "blob", "x" * 200_000], cwd),
            "NB_PARAMS")
    # few values but many bytes: 2,000 aliases of a 400 KB string were 800 MB of JSON built
    # before the size was looked at; and an alias inside its own anchor (a list holding itself)
    (cwd / "wide.yaml").write_text(f"s: &s {'x' * 400_000}\nt: [{', '.join(['*s'] * 2000)}]\n")
    (cwd / "self.yaml").write_text("a: &a [1, *a]\n")
    for name in ("wide.yaml", "self.yaml"):
        refused(run_inprocess(["debug", "nb.ipynb", "--dry-run", "-f", name], cwd), "NB_PARAMS")
    (cwd / "ok.yaml").write_text("data: /data/full\nlayers: [1, 2, 3]\n")
    assert run_inprocess(["debug", "nb.ipynb", "--dry-run", "-f", "ok.yaml"], cwd).rc == 0


def test_a_cell_timeout_too_large_to_wait_for_is_refused_before_the_kernel(cwd):
    """--timeout 1e308 passed the finite check, then nbclient overflowed (OverflowError:
    cannot convert float infinity to integer) once the kernel had started."""
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(), cwd / "nb.ipynb")
    refused(run_inprocess(["debug", "nb.ipynb", "--dry-run", "--timeout", "1e308"], cwd),
            "NB_TIMEOUT")


@pytest.mark.parametrize("argv", [["launch", "--nproc", "1", "--", "true"], ["sync"],
                                  ["clean", "--dry-run"], ["env"]])
def test_a_deleted_current_folder_is_refused_not_a_traceback(tmp_path, argv):
    """Before: FileNotFoundError from the first os.getcwd(), as a traceback."""
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh",
                           str(gone), sys.executable, "-m", "platform_plugin", *argv],
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "[CLI_CWD_GONE]" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_launch_from_a_notebook_whose_folder_was_deleted_is_refused(tmp_path):
    code = ("import os, sys\nos.chdir(sys.argv[1]); os.rmdir(sys.argv[1])\n"
            "from platform_plugin.errors import ConfigError\n"
            "from platform_plugin.launcher import launch\n"
            "try:\n    launch(['true'], nproc=1, tracking='none')\n"
            "except ConfigError as exc:\n    print(exc)\n")
    (tmp_path / "gone").mkdir()
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "gone")], env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert "[LAUNCH_CWD_GONE]" in done.stdout, done.stdout + done.stderr


SIGNAL_INSIDE_AN_IMPORT = '''
import os, signal, sys
import platform_plugin.cli.env as command
from platform_plugin.cli import main
from platform_plugin.util.stops import raise_interrupt

class SignalledWhileNamed:  # what a class body runs during an import (platform.uname_result's)
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10 ** 6):  # the handler runs between these bytecodes, inside __set_name__
            pass

def planted_run(args):  # a stand-in command: the import runs where `ui` imports Jupyter's modules
    signal.signal(signal.SIGTERM, raise_interrupt)
    class Imported:
        attribute = SignalledWhileNamed()
    return 0

command.run = planted_run
sys.exit(main(["env"]))
'''


def test_sigterm_inside_an_import_ends_the_command_as_an_interrupt_without_a_traceback(cwd):
    """`platform-run ui` SIGTERMed while it imported jupyter_server printed a traceback and
    exited 1: the KeyboardInterrupt raised in `platform`'s class body reached it as a
    RuntimeError ("Error calling __set_name__"), which no `except KeyboardInterrupt` caught."""
    proc = subprocess.run([sys.executable, "-c", SIGNAL_INSIDE_AN_IMPORT], cwd=cwd,
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "platform-run: interrupted" in proc.stderr and "Traceback" not in proc.stderr
