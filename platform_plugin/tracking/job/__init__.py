"""The launcher's side of tracking: a job's sink, its checks, its report, system metrics."""
