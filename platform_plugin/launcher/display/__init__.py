"""What a user sees of a job: the board, prefixed lines, the quiet filter, the failure table."""
