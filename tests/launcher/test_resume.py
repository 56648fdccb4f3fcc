"""A restarted job resumes: real launches on one server (the several-server route is in
test_multiserver.py), ranks that write checkpoints through checkpoint/manifest.py and fail once
after one of them. The launcher's summary and job.json say which checkpoint the next attempt
resumed from and how many steps the failure cost."""
from __future__ import annotations

import os

import pytest

from platform_plugin.launcher import launch
from platform_plugin.launcher.resume import highest_checkpoint_step, highest_spooled_step
from platform_plugin.tracking.rank.spool import SpoolWriter, encode_metric
from tests.launcher.helpers import ASSETS, PY, log_text, read_job

RANK = str(ASSETS / "resume_rank.py")


def run(log_dir, tmp_path, *args, **options):
    said: list[str] = []
    result = launch([PY, RANK, *args], nproc=2, backend="plain", log_dir=str(log_dir),
                    cwd=str(tmp_path), max_restarts=1, check=False, write=said.append,
                    show="none", **options)
    return result, "".join(said)


@pytest.mark.slow
def test_an_untracked_restart_resumes_from_the_newest_checkpoint(log_dir, tmp_path,
                                                                 clean_environ):
    result, said = run(log_dir, tmp_path, "100", "65", tracking="none")
    assert result.ok, said
    checkpoints = os.path.join(result.job_dir, "checkpoints")
    for rank in ("0", "1"):
        log = log_text(result.job_dir, rank)
        assert "START 61" in log and "DONE" in log
        assert "START 0" in log_text(os.path.join(result.job_dir, "attempt-1"), rank)
    step_60 = os.path.join(checkpoints, "step-0000000060")
    # nothing but the checkpoints says how far the failed attempt got: no more than step 60
    # said before attempt 2 starts, and again in the final summary
    assert said.count(f"[launcher] attempt 2 resumed from step 60 (checkpoint {step_60}), steps "
                      "lost to the failure: unknown") == 2, said
    [failed] = read_job(result.job_dir)["failed_attempts"]
    assert failed["resumed"] == {
        "attempt": 2, "step": 60, "checkpoint": step_60, "reached_step": 60,
        "reached_exactly": False, "steps_lost": None, "text": failed["resumed"]["text"]}
    assert sorted(os.listdir(checkpoints))[-1] == "step-0000000090"  # kept, not emptied


@pytest.mark.slow
def test_a_tracked_restart_counts_the_steps_lost_from_the_spools(log_dir, tmp_path,
                                                                 clean_environ):
    clean_environ.chdir(tmp_path)  # the local MLflow store goes here
    result, said = run(log_dir, tmp_path, "100", "65", tracking="mlflow",
                       no_system_metrics=True)
    assert result.ok, said
    step_60 = os.path.join(result.job_dir, "checkpoints", "step-0000000060")
    assert (f"attempt 2 resumed from step 60 (checkpoint {step_60}), 5 steps lost to the "
            "failure") in said
    [failed] = read_job(result.job_dir)["failed_attempts"]
    assert (failed["resumed"]["reached_step"], failed["resumed"]["steps_lost"]) == (65, 5)
    assert result.tracking.wait_ended()  # the helper ends the runs after launch() returned


@pytest.mark.slow
def test_a_checkpoint_folder_removed_mid_job_is_said_and_the_next_attempt_starts_over(
        log_dir, tmp_path, clean_environ):
    result, said = run(log_dir, tmp_path, "30", "15", "remove", tracking="none")
    assert result.ok, said
    checkpoints = os.path.join(result.job_dir, "checkpoints")
    assert (f"[launcher] the checkpoint folder {checkpoints} was removed while the job ran: "
            "attempt 2 starts from the beginning (made again, empty)") in said
    assert "attempt 2 resumed from the beginning (no complete checkpoint)" in said
    assert "Traceback" not in said
    assert "START 0" in log_text(result.job_dir, "0")
    assert os.path.isdir(os.path.join(checkpoints, "step-0000000020"))  # the new attempt's


def test_the_highest_step_skips_the_launchers_samples_and_half_lines(tmp_path):
    writer = SpoolWriter(tmp_path / "rank_0.jsonl")
    for step in (3, 7, 5):
        writer.append(encode_metric('"loss"', 1.0, step, 0))
    writer.append(encode_metric('"system/cpu"', 1.0, 900, 0))
    writer.close()
    with open(tmp_path / "rank_1.jsonl", "w") as stream:
        stream.write('["m","loss",1.0,6,0]\n["m","loss",1.0,99')  # killed mid-line
    assert highest_spooled_step(str(tmp_path)) == 7
    assert highest_spooled_step(str(tmp_path / "missing")) is None


def test_the_highest_checkpoint_step_is_the_failed_attempts_own(tmp_path):
    for name, attempt in (("step-0000000010", 0), ("step-0000000020", 1)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(f'{{"attempt": {attempt}}}')
    (tmp_path / "step-0000000015").mkdir()  # no manifest: died while writing it
    assert highest_checkpoint_step(str(tmp_path), 0) == 15
    assert highest_checkpoint_step(str(tmp_path), 1) == 20
    assert highest_checkpoint_step(str(tmp_path / "gone"), 0) is None
