"""What every side of tracking shares, below them all: the state files, the sink's choice, the store's URI, a job's conventions, folders, attempts and aggregates."""
