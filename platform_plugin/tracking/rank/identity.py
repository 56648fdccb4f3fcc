"""Who is logging: the rank's identity, read once from the environment the launcher set, and the
names of its spool file.

The platform's own docs suffix names with `os.getenv('RANK_ID', 'no-rank')`; a process
started without a rank id gets the same `no-rank` label so names stay comparable.
"""
from __future__ import annotations

import dataclasses
import os
import sys

from platform_plugin.tracking.rank.job_id import new_job_id

NO_RANK = "no-rank"
SPOOL_SUFFIX = ".jsonl"  # a stream's spool is rank_<label>.jsonl (see spool.py)


@dataclasses.dataclass(frozen=True)
class RankIdentity:
    """Who this process is in its job (device_id is None when DEVICE_ID is not set)."""

    rank_id: str | None
    device_id: str | None
    job_id: str
    job_name: str
    server_id: str
    host: str

    @property
    def label(self) -> str:
        """Suffix used for flat keys and wflogger names (`loss-3`, `loss-no-rank`)."""
        return self.rank_id if self.rank_id is not None else NO_RANK

    @property
    def stream(self) -> str:
        """Spool file stem of this rank (`rank_3`, `rank_no-rank`)."""
        return stream_name(self.label)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> RankIdentity:
        env = os.environ if environ is None else environ
        host = os.uname().nodename  # socket.gethostname()'s answer, without socket's import
        job_name = env.get("PLATFORM_JOB_NAME") or script_stem()
        return cls(
            rank_id=env.get("RANK_ID") or None,
            device_id=env.get("DEVICE_ID") or None,
            job_id=env.get("JOB_ID") or new_job_id(job_name),  # a process run without the launcher
            job_name=job_name,
            server_id=env.get("PLATFORM_SERVER_ID") or host,
            host=host,
        )


def stream_name(label: str) -> str:
    return f"rank_{label}"


def run_name(label: str) -> str:
    """`rank-03` so the MLflow UI sorts ranks numerically; non-numeric labels kept as is."""
    return f"rank-{int(label):02d}" if label.isdigit() else f"rank-{label}"


def script_stem() -> str:
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else "python"
    return os.path.splitext(os.path.basename(argv0.rstrip("/")))[0] or "python"  # Path.stem
