"""The rank side of tracking: the in-rank API, its spool and identity (the stdlib only)."""
