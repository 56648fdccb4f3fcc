"""The spool folder's state files (tracking/shared/state.py): saved and loaded back as they were, None
when absent, a damaged one refused with its name."""
from __future__ import annotations

import pytest

from platform_plugin.tracking.shared.state import (DamagedStateFile, HelperStatus, JobEnd, SinkConfig,
                                            StreamState)


@pytest.mark.parametrize("made", [
    SinkConfig("mlflow", tracking_uri="sqlite:///x.db", job={"job_id": "j"}, ranks={"0": {}}),
    JobEnd("FAILED", 1700000000.5, "rank 1 exited with 3", last=False),
    HelperStatus(pid=42, phase="forwarding", error="down")])
def test_each_spool_file_round_trips_and_is_none_when_absent(tmp_path, made):
    cls = type(made)
    assert cls.load(tmp_path) is None
    made.save(tmp_path)
    assert (tmp_path / cls.FILE).is_file() and cls.load(tmp_path) == made
    (tmp_path / cls.FILE).write_text('["not", "an object"]')  # torn, or not ours
    with pytest.raises(DamagedStateFile, match=cls.FILE):
        cls.load(tmp_path)


def test_a_stream_state_is_a_fresh_one_when_absent(tmp_path):
    assert StreamState.load(tmp_path, "rank_0") == StreamState()
    StreamState(offset=10, delivered=3, run_id="r").save(tmp_path, "rank_0")
    assert StreamState.load(tmp_path, "rank_0") == StreamState(offset=10, delivered=3, run_id="r")
