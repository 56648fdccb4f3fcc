"""What tracking reads of a launch plan and of a job's result: Protocols, so tracking never
imports the launcher (the launcher's `LaunchPlan`/`JobResult` match them structurally; mypy
checks that where the launcher passes them in). Read-only properties: tracking only reads."""
from __future__ import annotations

from typing import Mapping, Optional, Protocol, Sequence


class RankView(Protocol):
    @property
    def name(self) -> str: ...  # "0".."N-1", or "sched"/"store" for helper processes
    @property
    def rank_id(self) -> Optional[int]: ...
    @property
    def device_id(self) -> Optional[int]: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def log_path(self) -> str: ...
    @property
    def cwd(self) -> str: ...
    @property
    def role(self) -> str: ...  # "worker" for ranks


class PlanView(Protocol):
    @property
    def job_id(self) -> str: ...
    @property
    def job_name(self) -> str: ...
    @property
    def job_dir(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def world_size(self) -> int: ...
    @property
    def nnodes(self) -> int: ...
    @property
    def server_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def command(self) -> Sequence[str]: ...
    @property
    def ranks(self) -> Sequence[RankView]: ...


class FailureView(Protocol):
    @property
    def label(self) -> str: ...  # "rank 3"
    @property
    def how(self) -> str: ...  # "exit 3", "SIGKILL"


class ResultView(Protocol):
    @property
    def ok(self) -> bool: ...
    @property
    def status(self) -> str: ...  # JobStatus values: succeeded|failed|timeout|hung|interrupted
    @property
    def reason(self) -> str: ...
    @property
    def root_cause(self) -> Optional[FailureView]: ...
