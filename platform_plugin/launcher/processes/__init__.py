"""The job's processes: spawn, supervise, stop, reap; the job record and its result."""
