"""A sample of the soak (`make soak` runs 100 cycles): one cycle per kind of failure that
the other launcher tests do not already cover, 0 processes left."""
from __future__ import annotations

import io

import pytest

from tests.launcher import soak

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("scenario", ["double-fork", "setsid-grandchild", "cli-sigkill"])
def test_soak_sample_leaves_no_process(scenario):
    report = io.StringIO()
    left = soak.run(1, [scenario], out=report)
    assert left == {scenario: 0}, report.getvalue()
