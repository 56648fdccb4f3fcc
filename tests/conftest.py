"""Fixtures shared by every test module. Area-specific fixtures live in the area's own modules."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RANKTABLES = REPO / "tests" / "data" / "ranktables"  # copies of ../shared/ranktables
VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def ranktables() -> Path:
    return RANKTABLES


@pytest.fixture
def clean_environ(monkeypatch):
    """Remove platform variables inherited from the machine so tests start from nothing."""
    for name in list(os.environ):
        if name.startswith(("RANK_", "DEVICE_", "MS_", "PLATFORM_", "MLFLOW_", "JOB_ID",
                            "ASCEND_", "MASTER_", "WORLD_SIZE", "LOCAL_RANK")):
            monkeypatch.delenv(name, raising=False)
    return monkeypatch
