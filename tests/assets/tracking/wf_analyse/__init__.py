"""STAND-IN for the AI靶场 platform's private `wf_analyse` SDK (not installable off the
platform). Used only by tests: it records every call so a test can check names and values."""
