"""The launcher's single handle on tracking (contract in docs/internals.md).

    job_tracking = JobTracking.create(choice, plan)
    env = job_tracking.prepare()      # before spawning: store, experiment, parent + child runs
    job_tracking.start()              # forwarder thread in the supervisor
    report = job_tracking.finish(result)

`create(..., "none")` returns the base class, whose steps do nothing except tell the ranks that
tracking is off (so a rank's `get_tracker()` doesn't forward on its own).
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from platform_plugin.tracking import conventions
from platform_plugin.tracking.aggregates import JobAggregates
from platform_plugin.tracking.forwarder import Forwarder, drain_timeout
from platform_plugin.tracking.sinks import choose, choose_layout, get_sink
from platform_plugin.tracking.state import SinkConfig

PLATFORM_VARIABLES = ("RANK_TABLE_FILE", "RANK_START", "RANK_SIZE", "PLATFORM_SERVER_ID",
                      "PLATFORM_RUN_MODE")


@dataclass
class DeliveryReport:
    sink: str = "none"
    delivered: int = 0
    pending: int = 0
    reason: str = ""
    parent_run_id: str | None = None
    ui_hint: str = ""
    skipped: int = 0  # spool lines that were not records (a rank killed mid-write)
    rejected: int = 0  # records the sink refused for good
    spool_dir: str = ""


class JobTracking:
    """Base = tracking switched off: every step is a no-op, so the launcher never branches."""

    sink = "none"

    @classmethod
    def create(cls, choice: str, plan, *, layout: str | None = None) -> "JobTracking":
        env = job_environment(plan)
        sink_name = choose(choice, env)
        if sink_name is None:
            return cls()
        return SpoolingJobTracking(sink_name, plan, choose_layout(layout, env))

    def prepare(self) -> dict[str, str]:
        return {"PLATFORM_TRACKING": "none"}

    def start(self) -> None:
        pass

    def finish(self, result, last: bool = True) -> DeliveryReport:
        return DeliveryReport()


class SpoolingJobTracking(JobTracking):
    def __init__(self, sink_name: str, plan, layout: str):
        self.sink = sink_name
        self.plan = plan
        self.spool_dir = Path(plan.job_dir) / "tracking"
        self.config = job_sink_config(sink_name, plan, layout)
        sink = get_sink(sink_name)
        aggregates = (JobAggregates(self.config.ranks, sink, self.config)
                      if hasattr(sink, "deliver_aggregates") and layout == "runs" else None)
        self.forwarder = Forwarder(self.spool_dir, self.config, sink, aggregates=aggregates)
        self.setup_error = ""

    def prepare(self) -> dict[str, str]:
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.config.save(self.spool_dir)
        # Runs exist before any rank starts; a dead sink only defers this to the forwarder.
        self.setup_error = self.forwarder.sink.unavailable(self.config) or ""
        if not self.setup_error:
            try:
                self.forwarder.sink.ensure_runs(self.config, self.spool_dir, list(self.config.ranks))
            except Exception as exc:  # noqa: BLE001 - tracking must not stop the job
                self.setup_error = f"cannot create runs: {type(exc).__name__}: {exc}"
        return {"PLATFORM_TRACKING": self.sink,
                "PLATFORM_TRACKING_SPOOL_DIR": str(self.spool_dir),
                "PLATFORM_TRACKING_FORWARDER": "supervisor",
                "PLATFORM_TRACKING_LAYOUT": self.config.layout}

    def start(self) -> None:
        self.forwarder.start()

    def finish(self, result, last: bool = True) -> DeliveryReport:
        self.config.final_status = final_status(result)
        self.config.save(self.spool_dir)
        drained = self.forwarder.drain(drain_timeout(30))
        if self.forwarder.sink.unavailable(self.config) is None:
            if self.forwarder.aggregates is not None:
                self.forwarder.aggregates.finish()  # the steps some rank never completed
            try:
                self.forwarder.sink.end_job(self.config, self.spool_dir)
                self.config.ended = True
                self.config.save(self.spool_dir)
            except Exception as exc:  # noqa: BLE001
                self.forwarder.last_error = f"cannot end runs: {type(exc).__name__}: {exc}"
        return delivery_report(self.sink, self.spool_dir, self.forwarder, self.config,
                               self.plan.job_id, drained)


def delivery_report(sink: str, spool_dir: Path, forwarder: Forwarder, config: SinkConfig,
                    job_id: str, drained: bool) -> DeliveryReport:
    counts = forwarder.counts()
    notes = []
    if counts.pending:
        why = forwarder.last_error or ("drain timed out" if not drained else "not yet forwarded")
        notes.append(f"{counts.pending} records wait in {spool_dir} ({why}); deliver them with "
                     f"`platform-run sync {job_id}`")
    if counts.partial_lines:
        notes.append(f"{counts.partial_lines} rank(s) stopped mid-line: that last line is ignored")
    if counts.skipped:
        notes.append(f"{counts.skipped} unreadable spool lines skipped")
    if counts.rejected:
        notes.append(f"{counts.rejected} records refused by {sink} (see *.state.json last_error)")
    hint = f"{sink}: {counts.delivered} records delivered" + (f"; {notes[0]}" if notes else "")
    if sink == "mlflow":
        hint += f"; compare ranks: platform-run compare {job_id} --url"
    return DeliveryReport(sink=sink, delivered=counts.delivered, pending=counts.pending,
                          reason="; ".join(notes), parent_run_id=config.parent_run_id,
                          ui_hint=hint, skipped=counts.skipped, rejected=counts.rejected,
                          spool_dir=str(spool_dir))


def workers(plan) -> list:
    return [r for r in plan.ranks if getattr(r, "role", "worker") == "worker"]


def job_environment(plan) -> dict:
    """What the ranks will see (the process env plus .env values the launcher merged in), so
    MLFLOW_TRACKING_URI or PLATFORM_TRACKING from a .env file count here too."""
    ranks = workers(plan)
    return {**os.environ, **(dict(ranks[0].env) if ranks else {})}


def final_status(result) -> str:
    """MLflow RunStatus of a job: an interrupted job was KILLED, it did not fail."""
    if getattr(result, "ok", False):
        return "FINISHED"
    return "KILLED" if getattr(result, "status", "") == "interrupted" else "FAILED"


def job_sink_config(sink_name: str, plan, layout: str) -> SinkConfig:
    ranks_ = workers(plan)
    first_env = job_environment(plan)
    cwd = ranks_[0].cwd if ranks_ else None
    host = socket.gethostname()
    tags = {
        "job_id": plan.job_id,
        "mode": first_env.get("PLATFORM_RUN_MODE", ""),
        "command": " ".join(map(str, plan.command)) if not isinstance(plan.command, str) else plan.command,
        "backend": str(plan.backend),
        "world_size": str(plan.world_size),
        "rank_table": rank_table_summary(first_env.get("RANK_TABLE_FILE")),
    }
    tags.update({f"env.{k}": first_env[k] for k in PLATFORM_VARIABLES if first_env.get(k)})
    ranks = {
        str(r.rank_id): {"rank_id": r.rank_id, "device_id": r.device_id,
                         "server_id": r.env.get("PLATFORM_SERVER_ID", host), "host": host,
                         "log_path": str(r.log_path) if r.log_path else None}
        for r in ranks_
    }
    source, source_type = conventions.source(first_env, plan.command, cwd)
    return SinkConfig(
        sink=sink_name, layout=layout,
        tracking_uri=conventions.default_store(cwd, first_env)[0] if sink_name == "mlflow" else None,
        experiment_name=conventions.experiment_name(first_env, cwd),
        job={"job_id": plan.job_id, "job_name": plan.job_name, "run_name": plan.job_id,
             "parent": True, "tags": tags, "user": conventions.user(), "source": source,
             "source_type": source_type, "params": conventions.notebook_parameters(first_env)},
        ranks=ranks,
    )


def rank_table_summary(path: str | None) -> str:
    if not path:
        return "none"
    try:
        from platform_plugin.ranktable import load
        table = load(path)
        servers = ", ".join(f"{s.server_id}:{len(s.devices)}" for s in table.servers)
        return f"{Path(path).name}: {table.rank_size} devices on {len(table.servers)} server(s) ({servers})"
    except Exception:  # noqa: BLE001 - a summary is a tag, not a check (doctor checks)
        return Path(path).name
