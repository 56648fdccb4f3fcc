"""platform_plugin."""
