"""Forwarding inside the training process, for code started without the launcher.

The process gets its own run (named after the script, or `rank-NN` when RANK_ID is set), a
spool under `<log dir>/<job id>/tracking` and a forwarder thread; at exit the tracker flushes,
the thread drains for up to PLATFORM_TRACKING_DRAIN_TIMEOUT seconds (default 10) and the run
ends FINISHED. Whatever could not be delivered stays in the spool for `platform-run sync`.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from platform_plugin.tracking.shared import conventions
from platform_plugin.tracking.delivery.forwarder import Forwarder, drain_timeout
from platform_plugin.tracking.rank.identity import RankIdentity
from platform_plugin.tracking.shared.job_folders import log_dir
from platform_plugin.tracking.sinks import choose_layout, get_sink
from platform_plugin.tracking.shared.state import SinkConfig
from platform_plugin.variables import PLATFORM_RUN_MODE


def inprocess_spool_dir(identity: RankIdentity) -> Path:
    job_dir = log_dir() / identity.job_id
    # several hand-started processes may share a JOB_ID: each keeps its own folder and run
    return job_dir / ("tracking" if "JOB_ID" not in os.environ else f"tracking-{identity.label}")


def start_inprocess_forwarding(sink_name: str, identity: RankIdentity, tracker_cls: Any) -> Any:
    spool_dir = inprocess_spool_dir(identity)
    spool_dir.mkdir(parents=True, exist_ok=True)
    config = SinkConfig.load(spool_dir) or SinkConfig(
        sink=sink_name,
        layout=choose_layout(),
        tracking_uri=conventions.default_store(None, os.environ)[0] if sink_name == "mlflow" else None,
        experiment_name=conventions.experiment_name(os.environ, None),
        job={"job_id": identity.job_id, "job_name": identity.job_name, "parent": False,
             "tags": {"command": " ".join(sys.argv), "mode": PLATFORM_RUN_MODE.raw()},
             "user": conventions.user(),
             "source": conventions.source(os.environ, sys.argv, None)[0], "source_type": "LOCAL"},
        ranks={identity.label: {"rank_id": identity.rank_id, "device_id": identity.device_id,
                                "server_id": identity.server_id, "host": identity.host}},
    )
    config.save(spool_dir)
    sink = get_sink(sink_name)
    # Import the sink's library now: an import first attempted at interpreter exit fails
    # (MLflow registers atexit hooks while importing).
    try:
        sink.unavailable(config)
    except ImportError as exc:  # e.g. an image's Python without MLflow: spool, never fail
        print(f"platform_plugin.tracking: {sink_name} is not importable in this interpreter "
              f"({exc}); records are kept in {spool_dir}: deliver them with `platform-run sync "
              f"{spool_dir.parent}` where it is installed", file=sys.stderr)
        return tracker_cls(spool_dir, identity)
    forwarder = Forwarder(spool_dir, config, sink, labels=[identity.label], interval=1.0)

    def finish() -> None:
        drained = forwarder.drain(drain_timeout(10))
        if not drained:
            print(f"platform_plugin.tracking: {forwarder.counts().pending} records wait in "
                  f"{spool_dir} ({forwarder.last_error or 'sink busy'}); deliver them with "
                  f"`platform-run sync {spool_dir.parent}`", file=sys.stderr)
            return
        try:
            config.final_status = "FINISHED"
            forwarder.sink.end_job(config, spool_dir)
            config.ended = True
            config.save(spool_dir)
        except Exception as exc:  # noqa: BLE001 - exiting; the spool keeps everything
            print(f"platform_plugin.tracking: could not end the run: {exc}", file=sys.stderr)

    tracker = tracker_cls(spool_dir, identity, on_close=finish)
    forwarder.start()
    return tracker
