"""Planning a job: options and backends -> the plan; the refusals before anything exists."""
