"""Fixtures shared by every test area; each area's own live in its folder's conftest.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import PLATFORM_PREFIXES, RANKTABLES, REPO


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
        if name.startswith(PLATFORM_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    return monkeypatch
