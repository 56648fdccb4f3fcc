"""Launching: plan (pure) -> supervisor (processes) -> output (logs, display). See docs/launch.md."""
from .api import launch
from .plan import LaunchOptions, LaunchPlan, RankSpec, build_plan
from .result import JobFailed, JobResult, RankFailure

__all__ = ["launch", "build_plan", "LaunchOptions", "LaunchPlan", "RankSpec", "JobFailed",
           "JobResult", "RankFailure"]
