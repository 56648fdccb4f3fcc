"""Fixtures of the launcher tests."""
from __future__ import annotations

import pytest

from tests.launcher.helpers import kill_job


@pytest.fixture
def log_dir(tmp_path):
    """A log folder whose jobs are killed at teardown, whatever the test left running."""
    path = tmp_path / "logs"
    path.mkdir()
    yield path
    for job in path.iterdir():
        kill_job(str(job))
