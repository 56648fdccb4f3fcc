"""One identity per job, decided once by node 0 (the rank table's first server) before any
plan exists, and used by every server of the job whatever its folder or .env says.

It is a flat dict of strings sent with the job link's `go` (JobLink.agree):
- `job_id`: `--job-id` / PLATFORM_JOB_ID, else on the rank-table route rank_table_id.py's id (the
  same rule every server could derive), else a new one made from the job's name;
- `experiment` (a job of several servers): the MLflow experiment node 0 would track into
  (MLFLOW_EXPERIMENT_NAME > notebook > project folder, tracking/shared/conventions.py). Servers
  whose project folders are named differently still make one job: one parent run, found by
  its job id in that one experiment (tracking/sinks/mlflow_job.py).
- `resume_step`, `resume_checkpoint`: node 0's choice of the checkpoint every rank resumes
  from (the newest complete one in the job's checkpoint folder), absent when there is none;
  the same keys come with each restarted attempt's "go" (launcher/resume.py). For the first
  attempt the folder exists only when the job reuses one (`--checkpoint-dir` of an earlier
  job, or its `--job-id` in the same log folder).
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable, Dict, Optional

from platform_plugin.checkpoint.manifest import CheckpointUnavailable, newest_complete
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.planning.plan import JobPlace, checkpoint_folder
from platform_plugin.launcher.servers.rank_table_id import rank_table_job_id
from platform_plugin.tracking.shared.conventions import experiment_name
from platform_plugin.tracking.rank.job_id import new_job_id

EXPERIMENT_VARIABLE = "MLFLOW_EXPERIMENT_NAME"
RESUME_STEP, CHECKPOINT_KEY = "resume_step", "resume_checkpoint"
STEP_TEXT = re.compile(r"[0-9]{1,10}")  # a step a checkpoint folder's name can hold
MAX_PATH_SENT = 2048  # the path only names the checkpoint in summaries; "go" holds 4096


def proposed(place: JobPlace, options: LaunchOptions, environ: dict) -> dict[str, str]:
    """This server's proposal; node 0's is the one every server gets back from `agree`."""
    job_id = options.job_id
    if job_id is None and place.backend == "rank-table" and place.nnodes > 1:
        job_id = rank_table_job_id(place.job_name, place.rank_table_file, environ)
    identity = {"job_id": job_id or new_job_id(place.job_name)}
    if place.nnodes > 1:
        identity["experiment"] = experiment_name({**environ, **options.env}, options.cwd)
    folder = checkpoint_folder(place, identity["job_id"])
    if place.node_rank == 0 and os.path.isdir(folder):  # node 0 chooses for every server
        identity.update(_reused_checkpoints(folder))
    return identity


def _reused_checkpoints(folder: str) -> Dict[str, str]:
    """The resume keys of a checkpoint folder the first attempt finds (a job that reuses
    one); {} when it went away meanwhile (the ranks then start from the beginning)."""
    try:
        return resume_keys(folder)
    except CheckpointUnavailable:
        return {}


def resume_keys(folder: str) -> Dict[str, str]:
    """The identity keys of the newest complete checkpoint in `folder` ({} when there is none).
    Raises CheckpointUnavailable when `folder` is gone."""
    point = newest_complete(folder)
    if point is None:
        return {}
    return {RESUME_STEP: str(point.step),
            **({CHECKPOINT_KEY: point.path} if len(point.path) <= MAX_PATH_SENT else {})}


def resume_step(identity: Dict[str, str]) -> Optional[int]:
    """The step node 0 chose, None: nothing to resume."""
    text = identity.get(RESUME_STEP, "")
    return int(text) if STEP_TEXT.fullmatch(text) else None


def adopted(identity: dict[str, str], options: LaunchOptions, environ: dict,
            note: Callable[[str], None] | None = None) -> LaunchOptions:
    """The options with node 0's experiment in every rank's environment (options.env wins over
    the rest, so the ranks and this server's tracking both use it). A server whose own
    MLFLOW_EXPERIMENT_NAME names another experiment says so once, and so does one given another
    job id (`--job-id` / PLATFORM_JOB_ID) than node 0's: the job keeps node 0's id (its folders
    and runs), which the key made this launcher part of (docs/launch.md, Multi-node)."""
    mine_id = options.job_id
    if mine_id and mine_id != identity.get("job_id") and note is not None:
        note(f"--job-id / PLATFORM_JOB_ID is {mine_id[:200]!r} here, but node 0 runs the job as "
             f"{identity.get('job_id', '')[:200]!r}: this server joins that job (one id per job; "
             "a separate job needs its own --master-port and key)")
    experiment = identity.get("experiment")
    if not experiment:
        return options
    mine = {**environ, **options.env}.get(EXPERIMENT_VARIABLE)
    if mine and mine != experiment and note is not None:
        note(f"{EXPERIMENT_VARIABLE}={mine[:200]!r} here, but the job tracks into node 0's "
             f"experiment {experiment[:200]!r} (one experiment per job)")
    return dataclasses.replace(options, env={**options.env, EXPERIMENT_VARIABLE: experiment})
