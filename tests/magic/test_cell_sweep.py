"""A new user's sweep of the cell, in a real kernel.

The board shows a rank as a terminal would: a `\\r` progress bar is one line in its last state
(not one line per display flush), a 5 MB line without a newline is one clipped line (not 77
pieces of 64 KiB in the notebook), colours leave no escape codes. The stop button while the
ranks' points are delivered stops the wait, not the finished job."""
from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest

from tests.launcher.helpers import ASSETS, log_text, wait_for, wait_no_processes
from tests.magic.helpers import run_cell

pytestmark = pytest.mark.slow


def test_board_tail_is_what_a_terminal_shows(kernel):
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    cell = run_cell(kc, f"%dist_run --nproc 2 --backend plain --tracking none --log-dir "
                        f"{kc.log_dir} --job-name screen python {ASSETS / 'screen_rank.py'}")
    assert cell.ok, cell.stream + "\n".join(cell.error)
    board = cell.board
    for rank in range(2):
        section = board.split(f"-- rank {rank} (4 lines) --\n")[1].split("\n--")[0].splitlines()
        assert [line.strip()[:12] for line in section] == [
            "red error bo", "xxxxxxxxxxxx", "training: 10", "rank done"], section
        assert section[2].strip() == "training: 100%|" + "#" * 25
        assert len(section[1].strip()) == 200 and section[1].strip().endswith("…")  # text form
    html = cell.displays[-1][1]["text/html"]
    assert "\x1b" not in board + html and "[31m" not in board + html
    assert "<span style='color:#c62828;'>red error</span>" in html  # the colour is kept
    assert len(html) < 40_000, len(html)  # the notebook keeps the board: no megabytes in it
    job = next(d for d in kc.log_dir.iterdir() if d.name.startswith("screen"))
    assert "\x1b[31mred error" in log_text(str(job), "0")  # the log keeps every byte


def test_stop_while_tracking_delivers_keeps_the_job_result(kernel):
    """A tracking server that accepts connections and never answers (a listening socket here)
    holds the end-of-job delivery wait, which the board's title names; the kernel interrupt then
    ends the cell at once: the job's own result, a note where the points went, no
    KeyboardInterrupt from plugin frames."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        uri = f"http://127.0.0.1:{mute.getsockname()[1]}"
        assert run_cell(kc, f"import os; _uri = os.environ.get('MLFLOW_TRACKING_URI'); "
                            f"os.environ['MLFLOW_TRACKING_URI'] = {uri!r}").ok
        job = None
        try:
            msg_id = kc.execute(f"%dist_run --nproc 2 --backend plain --log-dir {kc.log_dir} "
                                f"--job-name upload python {ASSETS / 'board_rank.py'} 5 0")
            job = wait_for(lambda: [d for d in kc.log_dir.glob("upload-*")
                                    if (d / "tracking" / "end.json").exists()],
                           timeout=120, what="the ranks' end, tracking's wait")[0]
            time.sleep(0.5)
            km.interrupt_kernel()
            stream, reply, titles = "", None, []
            deadline = time.monotonic() + 60
            while reply is None:
                msg = kc.get_iopub_msg(timeout=max(1, deadline - time.monotonic()))
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    stream += msg["content"]["text"]
                elif "text/plain" in msg["content"].get("data", {}):  # the board's redraws
                    titles.append(msg["content"]["data"]["text/plain"].split("\n")[0])
                elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    reply = kc.get_shell_msg(timeout=30)["content"]
        finally:
            assert run_cell(kc, "os.environ.pop('MLFLOW_TRACKING_URI', None)\n"
                                "if _uri: os.environ['MLFLOW_TRACKING_URI'] = _uri").ok
            if job is not None:
                _stop_helper(job)
    assert reply["status"] == "ok", reply
    # while it waited the board said why the cell still ran; its last state does not any more
    assert any("sending the metrics to tracking" in title for title in titles), titles
    assert titles[-1].endswith("— succeeded"), titles
    assert "stopped waiting for tracking" in stream and f"platform-run sync {job}`" in stream, stream
    assert "Traceback" not in stream and "KeyboardInterrupt" not in stream, stream
    status = kc.execute_interactive("", user_expressions={"s": "str(_dist_result.status)"},
                                    timeout=60)["content"]["user_expressions"]["s"]
    assert status["data"]["text/plain"] == "'succeeded'"


def _stop_helper(job) -> None:
    """The forwarding helper waits on the mute server (its own session): end it."""
    try:
        pid = json.loads((job / "tracking" / "helper.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError, KeyError):
        pass


def test_a_failed_rank_with_a_huge_line_keeps_the_cell_small(kernel):
    """The root cause's last lines of a rank that printed 5 MB without a newline: clipped in the
    printed table and in the result the cell keeps as data (it was 1.3 MB of each)."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    script = kc.cwd / "huge_then_fail.py"
    script.write_text("import os, sys\nsys.stdout.write('y' * 5_000_000)\nsys.stdout.flush()\n"
                      "if os.environ['RANK_ID'] == '1':\n    sys.exit('rank 1 gives up')\n")
    cell = run_cell(kc, f"%dist_run --nproc 2 --backend plain --tracking none --grace 1 "
                        f"--log-dir {kc.log_dir} --job-name huge python {script}")
    assert not cell.ok and cell.reply["ename"] == "JobFailed"
    assert "rank 1 gives up" in cell.stream and "the whole line is in the log" in cell.stream
    assert len(cell.stream) < 30_000, len(cell.stream)
    cause = cell.results[0]["root_cause"]
    assert cause["last_lines"] and all(len(line) < 600 for line in cause["last_lines"])
    job = next(d for d in kc.log_dir.iterdir() if d.name.startswith("huge"))
    assert (job / "rank_1.log").stat().st_size > 5_000_000  # the log keeps every byte


def test_kernel_restart_while_a_job_runs_leaves_no_process(kernel):
    """Restart (JupyterLab's button: shutdown request, then kill) while a tracked job runs: no
    rank survives the kernel, and the forwarding helper ends too (its pipe closed without an
    end: it closes the runs as the launcher's death and exits) - nothing to find with ps."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    kc.execute(f"%dist_run --nproc 2 --backend plain --log-dir {kc.log_dir} "
               f"--job-name restarted python {ASSETS / 'board_rank.py'} 100000 0.2")
    job = wait_for(lambda: [d for d in kc.log_dir.glob("restarted-*")
                            if "step 2" in log_text(str(d), "1")], timeout=120,
                   what="the ranks running")[0]
    helper = json.loads(wait_for(lambda: (job / "tracking" / "helper.json").read_text()
                                 if (job / "tracking" / "helper.json").exists() else "",
                                 what="the helper")).get("pid")
    km.restart_kernel(now=False)
    assert wait_no_processes(str(job), timeout=30) == []
    assert helper is None or wait_for(lambda: not _alive(helper), timeout=60, what="helper end")
    assert run_cell(kc, "%load_ext platform_plugin").ok  # the new kernel works


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _failing_job(kernel, name: str, source: str, **run):
    """`%dist_run` of 2 untracked ranks running `source` (a script named after the job), which
    must fail; returns the cell."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    script = kc.cwd / f"{name}.py"
    script.write_text(source)
    cell = run_cell(kc, f"%dist_run --nproc 2 --backend plain --tracking none --grace 1 "
                        f"--log-dir {kc.log_dir} --job-name {name} python {script}", **run)
    assert not cell.ok and cell.reply["ename"] == "JobFailed"
    return cell


# Rank 1 fails once rank 0 has printed its line: else a rank 0 slower to start is stopped
# before it prints, and the board has no tail of it to show.
TRACEBACK_AFTER_RANK_0_PRINTED = """import os, time
rank = os.environ['RANK_ID']
def inner(x):
    return 1 / x
def outer():
    return inner(0)
print('rank', rank, 'starting', flush=True)
open(PRINTED + '.' + rank, 'w').close()
while rank == '1' and not os.path.exists(PRINTED + '.0'):
    time.sleep(0.02)
if rank == '1': outer()
"""


def test_a_ranks_traceback_is_shown_once_and_whole(kernel):
    """The failing rank's traceback: complete in the failure table, not a second time as the
    board's tail of that rank (the other rank's tail stays on the board)."""
    cell = _failing_job(kernel, "tb", TRACEBACK_AFTER_RANK_0_PRINTED.replace(
        "PRINTED", repr(str(kernel[1].cwd / "rank0.printed"))))
    html = cell.displays[-1][1]["text/html"]
    for frame in ("line 11, in <module>", "line 6, in outer", "line 4, in inner"):
        assert cell.stream.count(frame) == 1, cell.stream
    # once, in the root-cause block: the board's row points to it (a failed cell says each fact once)
    assert (cell.board + cell.stream).count("ZeroDivisionError: division by zero") == 1
    assert "-- rank 1 (" not in cell.board and "return 1 / x" not in cell.board + html
    assert "-- rank 0 (1 line) --" in cell.board and "rank 0 starting" in html, cell.board


def test_a_rank_calling_input_fails_at_once_with_a_hint(kernel):
    """input() in a rank must not hang the cell (stdin is empty), and the user learns why."""
    cell = _failing_job(kernel, "asks", "name = input('your name? ')\nprint('hello', name)\n",
                        timeout=60)
    assert "EOFError" in cell.stream and "hint: ranks read no keyboard" in cell.stream


def test_a_daemon_left_by_a_rank_is_named_when_it_is_stopped(kernel):
    """A rank that starts a daemon (its own session, SIGTERM ignored: a TensorBoard, a cache
    server) and ends well: the job stops the daemon too - nothing of a job outlives it - and the
    cell says which process it stopped; it said nothing, so a user's server vanished without a
    word and the cell waited out --grace in silence."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    script = kc.cwd / "leaves_daemon.py"
    pid_file = kc.cwd / "daemon.pid"
    script.write_text(
        "import os, signal, sys, time\n"
        "if os.environ['RANK_ID'] == '0' and os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "        os.closerange(0, 3)\n"
        f"        open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "        while True:\n"
        "            time.sleep(1)\n"
        "    os._exit(0)\n"
        "while os.environ['RANK_ID'] == '0' and not os.path.exists(" + repr(str(pid_file)) + "):\n"
        "    time.sleep(0.01)\n"
        "print('rank', os.environ['RANK_ID'], 'done', flush=True)\n")
    cell = run_cell(kc, f"%dist_run --nproc 2 --backend plain --tracking none --grace 1 "
                        f"--log-dir {kc.log_dir} --job-name daemon python {script}")
    assert cell.ok, cell.stream + "\n".join(cell.error)
    daemon = int(pid_file.read_text())
    assert not _alive(daemon)
    board = cell.board
    assert "succeeded" in board.splitlines()[0]
    assert f"stopping 1 process the ranks left behind: {daemon} (python" in board, board


def test_a_job_name_in_chinese_is_kept(kernel):
    """`--job-name 中文训练` (and a script 训练.py) named the job "job-…" without a word."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    script = kc.cwd / "训练.py"
    script.write_text("print('第一步')\n")
    for option, name in (("--job-name '中文 训练'", "中文-训练"), ("", "训练")):
        cell = run_cell(kc, f"%dist_run --nproc 1 --backend plain --tracking none {option} "
                            f"--log-dir {kc.log_dir} python {script}")
        assert cell.ok, cell.stream
        assert cell.results[0]["job_id"].startswith(f"{name}-2"), cell.results[0]["job_id"]
        assert "第一步" in cell.board
    assert [d.name for d in kc.log_dir.glob("中文-训练-2*")]


def test_a_refused_magic_says_what_did_not_happen(kernel):
    """"ConfigError: nothing was started" above a refused %platform_clean (a busy CODE/, a typo)
    or %dist_compare: those start nothing; they remove or compare nothing."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    for line, headline in (("%platform_clean --dryrun", "nothing was removed"),
                           ("%dist_compare --metrc loss", "nothing was compared"),
                           ("%dist_run --nprocs 2 python x.py", "nothing was started")):
        cell = run_cell(kc, line)
        assert cell.error[0] == f"ConfigError: {headline}", (line, cell.error)
        assert "did you mean" in "\n".join(cell.error)


def test_the_failure_table_quotes_a_progress_bar_once(kernel):
    """The root cause's last lines in a notebook: the bar's last state, then the traceback
    (the display stream's tail had one state per 1 s flush: 3 bars above the error)."""
    cell = _failing_job(kernel, "barfail", "import os, sys, time\nfor step in range(26):\n"
                        "    sys.stdout.write(f'\\rtraining: {step * 4}%')\n    sys.stdout.flush()\n"
                        "    time.sleep(0.1)\nif os.environ['RANK_ID'] == '1':\n"
                        "    raise RuntimeError('loss is nan')\n")
    quoted = cell.stream.split("lines of rank_1.log:")[1].split("  process ")[0]
    assert quoted.count("training:") == 1 and "training: 100%Traceback" in quoted, quoted
    assert "RuntimeError: loss is nan" in quoted
