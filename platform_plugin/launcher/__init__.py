"""Launching: plan (pure) -> supervisor (processes) -> output (logs, display). See docs/launch.md."""
from platform_plugin.launcher.api import launch
from platform_plugin.launcher.plan import LaunchOptions, LaunchPlan, RankSpec, build_plan
from platform_plugin.launcher.result import JobFailed, JobResult, RankFailure

__all__ = ["launch", "build_plan", "LaunchOptions", "LaunchPlan", "RankSpec", "JobFailed",
           "JobResult", "RankFailure"]
