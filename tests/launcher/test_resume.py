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


@pytest.fixture(autouse=True)
def unwrapped(monkeypatch):
    """No COLUMNS: the launcher's lines are checked whole (a terminal's width wraps them)."""
    monkeypatch.delenv("COLUMNS", raising=False)


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
    # one way to count attempts: 1 for the first, in the words, the folders, job.json, the
    # ranks' variable and the manifests they write
    assert read_job(result.job_dir)["attempt"] == 2 and failed["attempt"] == 1
    assert read_job(result.job_dir)["plan"]["ranks"][0]["env"]["PLATFORM_ATTEMPT_NUMBER"] == "2"
    with open(os.path.join(checkpoints, "step-0000000090", "manifest.json")) as stream:
        assert '"attempt_number": 2' in stream.read()
    with open(os.path.join(checkpoints, "step-0000000010", "manifest.json")) as stream:
        assert '"attempt_number": 1' in stream.read()
    # the failed attempt is headed as an attempt, not as the job failing; the summary gives
    # the whole job's time and each attempt's
    assert "[launcher] restarting the whole job as attempt 2 of 2 (--max-restarts)" in said
    assert "attempt 1 of 2 FAILED after " in said and f"job {result.job_id} FAILED" not in said
    assert failed["table"].startswith("attempt 1 of 2 FAILED after ")
    summary = next(line for line in said.splitlines() if " succeeded in " in line)
    assert "; attempt 1 failed after " in summary and ", attempt 2 ran " in summary, summary
    assert result.whole_duration_s > result.duration_s


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
    from platform_plugin.comparison.view import compare  # says how the job ended, above the table
    compared = compare(result.job_dir, "m", ui=False, show=False)
    assert compared.notes[0] == "ended: succeeded; resumed at attempt 2 from step 60"


@pytest.mark.slow
def test_a_checkpoint_folder_removed_mid_job_is_said_and_no_resume_is_claimed(
        log_dir, tmp_path, clean_environ):
    result, said = run(log_dir, tmp_path, "30", "15", "remove", tracking="none")
    assert result.ok, said
    checkpoints = os.path.join(result.job_dir, "checkpoints")
    assert (f"[launcher] the checkpoint folder {checkpoints} was removed while the job ran: "
            "attempt 2 has no platform checkpoint to resume from (the folder is made again, "
            "empty)") in said
    # only what the launcher knows: the script may keep snapshots of its own
    assert ("attempt 2 started; no platform checkpoint to resume from (the script may keep its "
            "own)") in said
    assert "from the beginning" not in said and "steps lost" not in said
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
    """Attempts count from 1 in a manifest's `attempt_number`; an earlier version's manifest
    counted from 0 in `attempt`, and is read as such."""
    for name, record in (("step-0000000010", '{"attempt_number": 1}'),
                         ("step-0000000020", '{"attempt_number": 2}'),
                         ("step-0000000025", '{"attempt": 1}')):  # the old way: attempt 2
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(record)
    (tmp_path / "step-0000000015").mkdir()  # no manifest: died while writing it
    assert highest_checkpoint_step(str(tmp_path), 1) == 15
    assert highest_checkpoint_step(str(tmp_path), 2) == 25
    assert highest_checkpoint_step(str(tmp_path / "gone"), 1) is None


@pytest.mark.slow
def test_a_job_given_an_earlier_jobs_checkpoint_folder_resumes_it(log_dir, tmp_path,
                                                                  clean_environ):
    """Node 0 chooses for the first attempt too: both ranks start after step 20, the earlier
    job's newest checkpoint, and never from one the other rank of this job just wrote."""
    shared = tmp_path / "shared"
    first, _ = run(log_dir, tmp_path, "30", "999", tracking="none", checkpoint_dir=str(shared))
    assert first.ok and "START 0" in log_text(first.job_dir, "1")
    second, said = run(log_dir, tmp_path, "50", "999", tracking="none",
                       checkpoint_dir=str(shared))
    assert second.ok, said
    assert f"[launcher] resuming from step 20 (checkpoint {shared / 'step-0000000020'})" in said
    for rank in ("0", "1"):
        assert "START 21" in log_text(second.job_dir, rank)


@pytest.mark.slow
def test_a_checkpoint_whose_writer_died_before_the_manifest_is_never_resumed(log_dir, tmp_path,
                                                                            clean_environ):
    """Rank 0 is SIGKILLed between the data of step 65's checkpoint and its manifest: attempt
    2 resumes from step 60, the newest complete one, on both ranks."""
    result, said = run(log_dir, tmp_path, "80", "65", "half", tracking="none")
    assert result.ok, said
    half = os.path.join(result.job_dir, "checkpoints", "step-0000000065")
    assert os.listdir(half) == ["step"]  # the data without its manifest
    assert "attempt 2 resumed from step 60 (checkpoint " in said
    [failed] = read_job(result.job_dir)["failed_attempts"]
    assert failed["root_cause"]["rank_id"] == 0 and "SIGKILL" in failed["table"]
    assert failed["resumed"]["reached_step"] == 65  # the half checkpoint says how far it got
    for rank in ("0", "1"):
        assert "START 61" in log_text(result.job_dir, rank)


@pytest.mark.slow
def test_traps_planted_between_attempts_are_never_resumed_and_the_restart_goes_on(
        log_dir, tmp_path, clean_environ):
    """Rank 1 fails after planting, above the newest complete checkpoint (60), a manifest of
    200,000 `[`, a FIFO manifest, a step folder linked to a complete checkpoint outside and a
    data file linked to /etc/passwd of the listed size (tests/hostile.py). The launcher, which
    reads them before attempt 2, neither hangs nor crashes: attempt 2 resumes from 60, the job
    succeeds and job.json says so."""
    result, said = run(log_dir, tmp_path, "100", "65", "hostile", tracking="none")
    assert result.ok, said
    assert "Traceback" not in said
    step_60 = os.path.join(result.job_dir, "checkpoints", "step-0000000060")
    assert f"attempt 2 resumed from step 60 (checkpoint {step_60})" in said, said
    assert read_job(result.job_dir)["result"]["status"] == "succeeded"
    for rank in ("0", "1"):
        assert "START 61" in log_text(result.job_dir, rank) and "DONE" in log_text(result.job_dir, rank)
