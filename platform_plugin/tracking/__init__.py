"""Per-rank tracking. (issue #4 builds this out; see docs/internals.md)"""
