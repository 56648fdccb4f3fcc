"""The launcher's single handle on tracking (contract in docs/internals.md). Issue #4 fills in
the MLflow / wflogger implementations; "none" is complete here."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DeliveryReport:
    sink: str = "none"
    delivered: int = 0
    pending: int = 0
    reason: str = ""
    parent_run_id: str | None = None
    ui_hint: str = ""


class JobTracking:
    """Base = tracking switched off: every step is a no-op, so the launcher never branches."""

    sink = "none"

    @classmethod
    def create(cls, choice: str, plan) -> "JobTracking":
        return cls()

    def prepare(self) -> dict[str, str]:
        return {}

    def start(self) -> None:
        pass

    def finish(self, result) -> DeliveryReport:
        return DeliveryReport()
