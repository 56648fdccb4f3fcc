"""A job's checkpoints across its restarts: `manifest` (the folder's format, rank side, the
stdlib only) and the framework helpers built on it, each imported by name."""
