"""`platform-run doctor`: why a job will not start."""
