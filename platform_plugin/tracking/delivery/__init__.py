"""Delivery: the forwarding helper, sync and in-process forwarding, exactly once."""
