"""Jobs after their start: in the background, attached to, listed, stopped (docs/launch.md)."""
