"""The cell experience in a real kernel: the live board, errors as one block, quiet output."""
from __future__ import annotations

import re

import pytest

from tests.launcher.helpers import ASSETS, log_text
from tests.magic.helpers import run_cell

pytestmark = pytest.mark.slow
RANK = ASSETS / "board_rank.py"
TRACKING_ASSETS = ASSETS.parent / "tracking"


def test_board_rows_metrics_tail_and_quiet(kernel):
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    cell = run_cell(kc, f"%dist_run --nproc 3 --backend plain --log-dir {kc.log_dir} "
                        f"--job-name board python {RANK} 40 0.05")
    assert cell.ok, cell.stream + "\n".join(cell.error)
    # one block updated in place, not a stream of rank lines
    assert cell.displays[0][0] == "display_data"
    assert {kind for kind, _ in cell.displays[1:]} == {"update_display_data"}
    assert "[rank " not in cell.stream and "step 3" not in cell.stream
    # the result also travels as data (the notebook runner reads it, never the printed text)
    assert [r["status"] for r in cell.results] == ["succeeded"]
    # the kernel's first job: MLflow creates its store, tqdm may warn; none of it in the cell
    assert "INFO" not in cell.stream and "Warning" not in cell.stream, cell.stream
    board = cell.board
    assert "succeeded" in board.splitlines()[0]
    # every title drawn says how the job stands: none said "— ended" before "— succeeded"
    titles = [data["text/plain"].splitlines()[0] for _kind, data in cell.displays]
    outcomes = [t.split("— backend plain — ", 1)[1] for t in titles if "— backend plain — " in t]
    assert outcomes and all(o.startswith("succeeded") for o in outcomes), titles
    for rank in range(3):
        row = next(line for line in board.splitlines() if line.strip().startswith(f"rank {rank} "))
        assert " ok " in row and " 39 " in row and "loss=0.025" in row, row  # last step, metric
        assert f"rank {rank} finished" in row  # the last output line
        # the tail: the last lines, the count of earlier ones (42 = chatter + 40 steps + finished)
        assert f"-- rank {rank} (42 lines, 38 earlier lines in the log) --" in board
    assert "DISTRIBUTED(" not in board  # MindSpore networking chatter: logs only
    job = next(d for d in kc.log_dir.iterdir() if d.name.startswith("board"))
    assert "DISTRIBUTED(" in log_text(str(job), "0") and "rank 0 step 0" in log_text(str(job), "0")
    assert "3 lines of MindSpore networking chatter" in cell.stream
    # the cell names the cell's way to compare the ranks, not a command for a terminal; the
    # job's folder, as the job is not in the default log folder (--log-dir), and it works
    hint = f"%dist_compare {job}"
    assert f"compare ranks: {hint}" in cell.stream, cell.stream
    assert "platform-run compare" not in cell.stream
    compared = run_cell(kc, hint + " --no-ui")
    shown = compared.stream + "".join(str(data) for _kind, data in compared.displays)
    assert compared.ok and "rank-02" in shown, shown[:2000] + "\n".join(compared.error)
    # a metric no rank logged: one refusal naming the metrics there are (as the CLI does)
    wrong = run_cell(kc, hint + " --metric los --no-ui")
    assert not wrong.ok and wrong.error[0] == "ConfigError: nothing was compared", wrong.error
    assert "[COMPARE_METRIC] at --metric:" in wrong.error[1] and "its metrics: loss" in wrong.error[1]
    html = cell.displays[-1][1]["text/html"]
    assert "<table>" in html and "rank 2 finished" in html
    # --verbose brings the chatter back; --show all streams prefixed lines as before
    cell = run_cell(kc, f"%dist_run --nproc 1 --backend plain --tracking none --verbose "
                        f"--show all --log-dir {kc.log_dir} python {RANK} 2 0")
    assert cell.ok and "[rank 0] [WARNING] DISTRIBUTED(" in cell.stream and not cell.displays


def test_errors_are_one_block_without_plugin_frames(kernel):
    km, kc = kernel
    run_cell(kc, "%load_ext platform_plugin")
    cell = run_cell(kc, "%dist_run --nproc 0 python x.py")
    assert not cell.ok and cell.reply["ename"] == "ConfigError"
    assert cell.error[0] == "ConfigError: nothing was started"
    assert cell.error[1].strip().startswith("[LAUNCH_NPROC] at --nproc:")
    assert len(cell.error) == 2
    cell = run_cell(kc, f"%dist_run --nproc 2 --backend plain --grace 1 --tracking none "
                        f"--log-dir {kc.log_dir} python {RANK} 3 0 1")
    assert not cell.ok and cell.reply["ename"] == "JobFailed"
    assert len(cell.error) == 1 and cell.error[0].startswith("JobFailed: job "), cell.error
    # the board turned into the result (each process's end in its row), one root-cause block
    # with the last lines below it, no second process table
    assert "exit 3 — ROOT CAUSE" in cell.board, cell.board
    assert "rank 1 about to fail" not in cell.board  # its lines: in the root-cause block only
    assert cell.stream.count("rank 1 about to fail") == 1 and "root cause: rank 1" in cell.stream
    assert not re.search(r"process\s+rank\s+pid", cell.stream), cell.stream
    text = "\n".join(cell.error) + cell.stream
    assert "magics/dist_run.py" not in text and "Traceback" not in text and 'File "' not in text
    assert "exit 3" in cell.board  # the board's last state shows the failed rank


def test_help_in_the_cell_and_suggestions(kernel):
    km, kc = kernel
    run_cell(kc, "%load_ext platform_plugin")
    cell = run_cell(kc, "%dist_run --help")
    assert cell.ok and not cell.displays
    for flag in ("--nproc N, --nproc-per-node N", "--show", "--verbose", "--expand", "examples:"):
        assert flag in cell.stream, flag
    assert "docs/" not in cell.stream  # a pip user has no docs folder
    cell = run_cell(kc, "%dist_run?")
    pager = cell.reply["payload"][0]["data"]["text/plain"]
    assert "--max-lines-per-sec" in pager and "--nproc" in pager
    cell = run_cell(kc, "%dist_run --nprocs 2 python x.py")
    assert cell.reply["ename"] == "ConfigError"
    assert any("did you mean --nproc?" in line for line in cell.error), cell.error


def test_platform_clean_reports_and_sizes_code(kernel, tmp_path):
    km, kc = kernel
    run_cell(kc, "%load_ext platform_plugin")
    code = tmp_path / "CODE"
    (code / "kernel_meta").mkdir(parents=True)
    (code / "kernel_meta" / "op.o").write_bytes(b"x" * 4096)
    (code / "train.py").write_text("print(1)\n")
    (code / "outputs").mkdir()
    for name in ("digits_mlp.ckpt", "digits_mlp.pt", "digits_mlp.safetensors"):
        (code / "outputs" / name).write_bytes(b"w")
    cell = run_cell(kc, f"%platform_clean --root {code} --dry-run")
    assert cell.ok, cell.error
    assert "would remove" in cell.stream and "kernel_meta" in cell.stream
    for name in ("digits_mlp.ckpt", "digits_mlp.pt", "digits_mlp.safetensors"):
        assert f"outputs/{name}" in cell.stream  # every framework's checkpoint, not MindSpore's only
    assert "4.0 KiB before" in cell.stream and (code / "kernel_meta" / "op.o").exists()
    cell = run_cell(kc, f"%platform_clean --root {code}")
    assert cell.ok and not (code / "kernel_meta").exists() and (code / "train.py").exists()
    assert "B after" in cell.stream


def test_ranks_started_in_a_kernel_write_no_forced_colours_into_their_logs(kernel):
    """ipykernel sets FORCE_COLOR=1 and CLICOLOR_FORCE=1 for the cell's own subprocesses; a rank
    inheriting them writes escape codes into its log (read with less/grep). A rank of a kernel
    does not get them, unless asked for with launch(env=...)."""
    km, kc = kernel
    run_cell(kc, "%load_ext platform_plugin")
    probe = ("import os; print('colours:', os.environ.get('FORCE_COLOR'), "
             "os.environ.get('CLICOLOR_FORCE'))")
    cell = run_cell(kc, "import os\nprint('kernel:', os.environ.get('FORCE_COLOR'), "
                        "os.environ.get('CLICOLOR_FORCE'))")
    assert "kernel: 1 1" in cell.stream  # what ipykernel sets (the premise of this test)
    cell = run_cell(kc, f"%dist_run --nproc 1 --backend plain --tracking none --job-name nocolour "
                        f"--log-dir {kc.log_dir} python -c {probe!r}")
    assert cell.ok, cell.error
    job = max((d for d in kc.log_dir.iterdir() if d.name.startswith("nocolour")),
              key=lambda d: d.stat().st_mtime)
    assert "colours: None None" in log_text(str(job), "0")
    cell = run_cell(kc, "from platform_plugin import launch\n"
                        f"r = launch(['python', '-c', {probe!r}], nproc=1, backend='plain', "
                        f"tracking='none', log_dir={str(kc.log_dir)!r}, "
                        "env={'FORCE_COLOR': '1'})\nprint('job dir:', r.job_dir)")
    assert cell.ok, cell.error
    job_dir = cell.stream.split("job dir: ", 1)[1].split()[0]
    assert "colours: 1 None" in log_text(job_dir, "0")


LONG_NAMES = """
import time
from platform_plugin import tracking
t = tracking.get_tracker()
for step in range(12):
    t.log_metric("validation_accuracy_top5_over_all_batches", 0.5 + step / 100, step=step)
    t.log_metric("epoch_mean_training_loss_of_this_rank", 1.0 / (step + 1), step=step)
    t.log_metric("samples_per_s", 800.0 + step, step=step)
    if step % 4 == 0:
        t.log_metric("learning_rate_after_the_warmup_phase", 0.1, step=step)
    time.sleep(0.05)
"""


def test_long_metric_names_leave_the_throughput_on_the_board(kernel, tmp_path):
    """The column was cut after ~34 characters: samples/s vanished once long-named metrics came.
    The most logged metrics, shortened in the middle, and the throughput last, whole; and
    --board-metrics picks the column."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    script = tmp_path / "long_names.py"
    script.write_text(LONG_NAMES)
    base = f"%dist_run --nproc 2 --backend plain --tracking mlflow --log-dir {kc.log_dir}"
    cell = run_cell(kc, f"{base} --job-name longnames python {script}")
    assert cell.ok, cell.stream + "\n".join(cell.error)
    rows = [l for l in cell.board.splitlines() if l.strip().startswith(("rank 0 ", "rank 1 "))]
    assert len(rows) == 2, cell.board
    for row in rows:
        assert "samples_per_s=811" in row, row  # the last step's throughput, whole
        assert "valid…ches=0.61" in row and "epoch…rank=0.08333" in row, row
        assert "lear" not in row, row  # logged every 4th step: the least logged is left out
    html = cell.displays[-1][1]["text/html"]
    assert html.count("samples_per_s=811") == 2
    cell = run_cell(kc, f"{base} --job-name picked --board-metrics samples_per_s,"
                        f"learning_rate_after_the_warmup_phase python {script}")
    assert cell.ok, cell.stream + "\n".join(cell.error)
    row = next(l for l in cell.board.splitlines() if l.strip().startswith("rank 0 "))
    # the metrics column as the user ordered it, the long name shortened to fit
    assert "samples_per_s=811 learning_rate_a…e_warmup_phase=0.1 " in row, row
    assert "vali" not in row and "epoc" not in row, row


def test_each_rank_draws_its_loss_curve_and_a_diverging_rank_stands_out(kernel):
    """A real 2-rank MindSpore job that knows nothing of the platform (LossMonitor's lines, read
    into each rank's spool): the board's HTML holds one curve per rank, the rank made to diverge
    (a learning rate too large) rising in red, the other falling; the text board its blocks."""
    km, kc = kernel
    assert run_cell(kc, "%load_ext platform_plugin").ok
    assert run_cell(kc, "import os; os.environ['MS_DIVERGE'] = '1'").ok
    script = TRACKING_ASSETS / "ms_monitors.py"
    cell = run_cell(kc, f"%dist_run --nproc 2 --backend plain --log-dir {kc.log_dir} "
                        f"--job-name curves python {script}")
    assert run_cell(kc, "del os.environ['MS_DIVERGE']").ok
    assert cell.ok, cell.stream + "\n".join(cell.error)
    html = cell.displays[-1][1]["text/html"]
    curves = re.findall(r"<svg class='curve (\w+)'.*?<title>([^<]*)</title>", html)
    assert [(kind, title.split(":")[0]) for kind, title in curves] == [
        ("falling", "rank 0"), ("rising", "rank 1")], curves
    assert "loss" in curves[1][1] and " → " in curves[1][1]
    rows = {r: next(line for line in cell.board.splitlines() if line.strip().startswith(f"rank {r} "))
            for r in (0, 1)}
    assert any(block in rows[1] for block in "▆▇█") and "▁" in rows[0], rows
