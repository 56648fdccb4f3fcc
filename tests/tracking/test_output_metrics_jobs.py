"""Metrics from the ranks' output through the real launcher: a MindSpore script with its own
LossMonitor/TimeMonitor on CPU (2 ranks) gets its loss per rank into MLflow (a sqlite store) and
into `platform-run compare` without a line of tracking code; a plain script's lines through
`--metrics-from-output` and the project's platform.toml; a bad regex refused before anything
exists; the rank's own tracker winning for a name it logs itself."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from platform_plugin.cli import main
from platform_plugin.launcher import launch
from platform_plugin.tracking.rank.spool import read_complete
from tests.helpers import copy_tracking_asset
from tests.tracking.helpers import child_runs, client

QUIET = {"write": lambda text: None, "no_system_metrics": True}
PRINTS_LOSS = ("import os\nrank = int(os.environ['RANK_ID'])\n"
               "for step in range(5):\n    print(f'it {step} loss: {(rank + 1) / (step + 1)}', flush=True)\n")


def _losses(c, run) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in c.get_metric_history(run.info.run_id, "loss"))


@pytest.mark.slow
def test_a_loss_monitor_scripts_loss_per_rank_in_mlflow_and_compare(tracking_env, tmp_path, capsys):
    copy_tracking_asset("ms_monitors.py", tmp_path)
    result = launch([sys.executable, "ms_monitors.py"], nproc=2, backend="plain",
                    cwd=str(tmp_path), **QUIET)
    assert result.ok and result.tracking.pending == 0
    assert result.tracking.wait_ended()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = child_runs(c, result.tracking.parent_run_id)
    assert [r.info.run_name for r in runs] == ["rank-00", "rank-01"]
    for rank, run in enumerate(runs):
        log = Path(result.job_dir, f"rank_{rank}.log").read_text()
        printed = [float(line.rsplit(" ", 1)[1]) for line in log.splitlines() if "loss is" in line]
        losses = _losses(c, run)
        # 2 epochs x 8 steps, at the job-wide step; the values the rank printed
        assert [s for s, _ in losses] == list(range(1, 17))
        assert [v for _, v in losses] == pytest.approx(printed)
        for name in ("epoch_time_s", "step_time_s"):  # TimeMonitor, once per epoch
            assert [m.step for m in c.get_metric_history(run.info.run_id, name)] == [1, 2]
    capsys.readouterr()
    assert main(["compare", result.job_id]) == 0
    table = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
             if line.startswith("rank-")}
    assert set(table) == {"rank-00", "rank-01"}
    assert table["rank-00"][3] == "16"  # points of loss, the default metric


@pytest.mark.slow
def test_the_ranks_own_metrics_callback_wins_over_the_lines(tracking_env, tmp_path):
    """The rank logs `loss` and `epoch_time_s` itself (MetricsCallback) and prints
    LossMonitor's and TimeMonitor's lines: one point per step, not two; `step_time_s`, which
    only the lines give, is still read."""
    copy_tracking_asset("ms_monitors.py", tmp_path)
    result = launch([sys.executable, "ms_monitors.py"], nproc=2, backend="plain",
                    cwd=str(tmp_path), env={"MS_WITH_CALLBACK": "1"}, **QUIET)
    assert result.ok and result.tracking.wait_ended()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for run in child_runs(c, result.tracking.parent_run_id):
        assert [s for s, _ in _losses(c, run)] == list(range(1, 17))
        for name in ("epoch_time_s", "step_time_s"):
            assert [m.step for m in c.get_metric_history(run.info.run_id, name)] == [1, 2]
    spool = Path(result.job_dir, "tracking", "rank_0.jsonl")
    parsed = [r[1] for r, _ in read_complete(spool, 0).records if r[1] in ("loss", "epoch_time_s")]
    assert parsed.count("loss") == 16 and parsed.count("epoch_time_s") == 2


@pytest.mark.slow
def test_a_plain_scripts_lines_through_the_flag_and_platform_toml(tracking_env, tmp_path):
    (tmp_path / "train.py").write_text(PRINTS_LOSS)
    result = launch([sys.executable, "train.py"], nproc=2, backend="plain", cwd=str(tmp_path),
                    metrics_from_output=r"it (?P<step>\d+) loss[: ]+(?P<loss>[0-9.eE+-]+)", **QUIET)
    assert result.ok
    for rank in (0, 1):
        spool = Path(result.job_dir, "tracking", f"rank_{rank}.jsonl")
        assert [(r[1], r[2], r[3]) for r, _ in read_complete(spool, 0).records] == [
            ("loss", (rank + 1) / (step + 1), step) for step in range(5)]
    # once per project: platform.toml's [launch] table, the flag not given
    (tmp_path / "platform.toml").write_text(
        "[launch]\nmetrics_from_output = 'loss[: ]+(?P<loss>[0-9.eE+-]+)'\n")
    result = launch([sys.executable, "train.py"], nproc=2, backend="plain", cwd=str(tmp_path),
                    **QUIET)
    assert result.ok and result.tracking.wait_ended()
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = child_runs(c, result.tracking.parent_run_id)
    assert [[v for _, v in _losses(c, run)] for run in runs] == [
        pytest.approx([(rank + 1) / (step + 1) for step in range(5)]) for rank in (0, 1)]


LINES = 50_000  # a rank's loss lines after its backtracking one: about 2 MB, more than the
# parser's pipe and the launcher's backlog for it hold, so chunks are also refused, not only left
BACKTRACKS = ("import os\nrank = int(os.environ['RANK_ID'])\n"
              "print('a' * 64 + 'b', flush=True)\n"
              f"for step in range({LINES}):\n"
              "    print(f'it {step} loss: {(rank + 1) / (step + 1)}')\n"
              "print('done', rank, flush=True)\n")


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if text.encode() in cmdline.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_backtracking_pattern_never_holds_up_the_output(tracking_env, tmp_path):
    """`(a+)+$` on a line of 64 `a`s ending in `b` would match for longer than the universe's
    age: the parser process sits in it, while every rank's lines still reach the logs and the
    display, the job ends, the lines not parsed are counted and said once, and the parser is
    gone (no orphan)."""
    (tmp_path / "train.py").write_text(BACKTRACKS)
    shown: list[str] = []
    result = launch([sys.executable, "train.py"], nproc=2, backend="plain", cwd=str(tmp_path),
                    metrics_from_output=r"loss[: ]+(?P<loss>[0-9.]+)|(a+)+$",
                    write=shown.append, no_system_metrics=True)
    assert result.ok
    display = "".join(shown).splitlines()
    for rank in (0, 1):
        log = Path(result.job_dir, f"rank_{rank}.log").read_text().splitlines()
        assert len(log) == LINES + 2 and log[-1] == f"done {rank}"
        assert [line for line in display if line.startswith(f"[rank {rank}] ")] == [
            f"[rank {rank}] {line}" for line in log]
    said = [line for line in display if "not parsed for metrics" in line]
    # every line: the parser never got past the first chunk of either rank
    assert len(said) == 1 and f" {2 * (LINES + 2)} line(s) were not parsed" in said[0], said
    assert "could not keep up" in said[0] and "stopped" in said[0]
    assert _processes_naming(str(tmp_path)) == [] or all(
        b"parse_process" not in Path(f"/proc/{pid}/cmdline").read_bytes()
        for pid in _processes_naming(str(tmp_path)))


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platform_plugin", "launch", "--nproc", "1",
                           "--log-dir", str(tmp_path / "logs"), *args, "--", sys.executable,
                           "-c", "print('loss: 1')"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("regex, said", [
    ("loss: (?P<loss>[0-9.]+", "not a regular expression"),
    ("loss: ([0-9.]+)", "named group"),
])
def test_a_bad_regex_is_refused_before_anything_exists(tracking_env, tmp_path, regex, said):
    done = _cli(tmp_path, "--metrics-from-output", regex)
    assert done.returncode == 2, done.stderr
    assert "[LAUNCH_METRICS_REGEX]" in done.stderr and said in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "logs").exists()


def test_a_bad_platform_toml_launch_table_is_refused(tracking_env, tmp_path):
    (tmp_path / "platform.toml").write_text("[launch]\nmetrics_from_output = 'loss (?P<x'\n")
    done = _cli(tmp_path)
    assert done.returncode == 2 and "[LAUNCH_METRICS_REGEX]" in done.stderr
    assert "platform.toml [launch] metrics_from_output" in done.stderr
    (tmp_path / "platform.toml").write_text("[launch]\nmetric_from_output = 'loss (?P<x>1)'\n")
    done = _cli(tmp_path)
    assert done.returncode == 2 and "[LAUNCH_PROJECT_FILE]" in done.stderr
    assert "metric_from_output is no setting" in done.stderr
    assert not (tmp_path / "logs").exists()
