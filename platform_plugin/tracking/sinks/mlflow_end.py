"""The end of a job in MLflow: every rank's log (and a stopped job's stacks) uploaded to its
run, and the runs ended with the job's status - except a run whose stream still has records in
the spool: it stays RUNNING, tagged with how many (and so does the job's run), and `platform-run
sync` ends it once it has delivered them. Called by MlflowSink.end_job with the sink's client
(MLflow's, or mlflow_rest.py's for a server with the bulk route: the same calls)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from platform_plugin.tracking.rank.identity import stream_name
from platform_plugin.tracking.sinks import mlflow_aggregates, mlflow_job
from platform_plugin.tracking.shared.state import SinkConfig, StreamState
from platform_plugin.tracking.sinks.mlflow_writers import RunStore

PENDING_TAG = "platform.pending_records"  # on runs left RUNNING with records still in the spool


def end_job(client: RunStore, config: SinkConfig, spool_dir: Path, pending: dict[str, int] | None,
            sink: Any | None = None) -> bool:
    """True when every run ended (nothing was pending). The parent of a job on several servers
    gets its job-wide aggregates from `sink` just before it ends (mlflow_aggregates.py)."""
    status = config.final_status or "FINISHED"
    pending = {k: v for k, v in (pending or {}).items() if v}
    for label, info in config.ranks.items():
        state = StreamState.load(spool_dir, stream_name(label))
        run_id = state.run_id or config.parent_run_id
        if run_id:
            _upload_files(client, config, spool_dir, label, info, run_id)
        if state.run_id and state.run_id != config.parent_run_id:
            if config.job.get("keep_parent_open") and not pending.get(label):
                continue  # a restart follows: the next attempt goes on in the run and ends it
            _end_or_mark(client, state.run_id, status, pending.get(label, 0))
    if config.parent_run_id and not config.job.get("keep_parent_open"):
        if sum(pending.values()):
            client.set_tag(config.parent_run_id, PENDING_TAG, str(sum(pending.values())))
        else:  # one job across servers: the last server's launcher ends it (mlflow_job.py)
            if PENDING_TAG in client.get_run(config.parent_run_id).data.tags:
                client.delete_tag(config.parent_run_id, PENDING_TAG)
            mlflow_job.end_parent(client, config, status, config.job.get("end_reason", ""),
                                  None if sink is None else
                                  lambda: mlflow_aggregates.job_wide(client, config, sink))
    return not pending


def _upload_files(client: RunStore, config: SinkConfig, spool_dir: Path, label: str, info: dict,
                  run_id: str) -> None:
    """The rank's log, and its stack dump when the job was stopped, into its run (under
    rank_<label>/ in the job's run when the rank has no run of its own: layout flat)."""
    own = run_id != config.parent_run_id
    log_path = info.get("log_path")
    if log_path and Path(log_path).is_file():
        client.log_artifact(run_id, log_path, "logs" if own else f"logs/rank_{label}")
    stack = Path(spool_dir).parent / "stacks" / f"rank_{label}.txt"  # a stopped job's
    if stack.is_file():
        client.log_artifact(run_id, str(stack), "stacks" if own else f"stacks/rank_{label}")


def _end_or_mark(client: RunStore, run_id: str, status: str, pending: int) -> None:
    if pending:
        client.set_tag(run_id, PENDING_TAG, str(pending))
        return
    if PENDING_TAG in client.get_run(run_id).data.tags:
        client.delete_tag(run_id, PENDING_TAG)
    client.set_terminated(run_id, status)
