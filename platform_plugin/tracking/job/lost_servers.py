"""A server of a multi-server job lost after this server had finished its own tracking.

Each launcher hands the servers it saw vanish (the job link) to its end record, and its helper
reports them on the job's parent run (mlflow_job.end_parent). A server lost *later* - its
machine gone while it finished its own tracking, after this one had reported - was reported
by nobody: the parent stayed RUNNING until `platform-run sync JOB --end FAILED` ran on that
server. The launcher calls `report_lost` once every server's end is known (the job link's
conclusion); the MLflow client is loaded here only when there is such a server.
"""
from __future__ import annotations

from pathlib import Path

from platform_plugin.tracking.shared.state import JobEnd, SinkConfig


def report_lost(spool_dir: str, gone: list[str]) -> str:
    """Report on the job's parent the servers of `gone` that this server's end record did not
    name. Returns what the launcher says about it ("" when there was nothing to report)."""
    end = JobEnd.load(spool_dir)
    late = [server for server in gone if end is None or server not in end.gone]
    config = SinkConfig.load(spool_dir)
    if not late or config is None or config.sink != "mlflow" or not config.parent_run_id or \
            config.servers <= 1:
        return ""  # nothing new, or no parent run shared by servers (wflogger, none made yet)
    names = ", ".join(late)
    # the MLflow side loads into the launcher only for such a server
    from platform_plugin.tracking.sinks.mlflow_sink import MlflowSink
    sink = MlflowSink()
    try:
        sink.report_gone(config, Path(spool_dir), late)
    except Exception as exc:  # noqa: BLE001 - the job's result stands; say what is left to do
        return (f"server(s) {names} vanished after this server's tracking had finished; "
                f"reporting that on the job's parent run failed ({type(exc).__name__}: "
                f"{str(exc)[:200]}): `platform-run sync JOB --end FAILED` on that server ends it")
    said = f"server(s) {names} vanished after this server's tracking had finished: reported " \
           "FAILED on the job's parent run"
    # the parent ended here: its job-wide aggregates were computed here too
    return f"{said}; {sink.aggregates_problem}" if sink.aggregates_problem else said
