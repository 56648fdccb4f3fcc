"""Run a notebook through papermill as the debug or the full-run environment would."""
