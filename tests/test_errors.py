"""Error values cross process boundaries: a Problem and a ConfigError survive pickling
(multiprocessing, concurrent.futures) with their codes."""
from __future__ import annotations

import pickle

from platform_plugin.errors import ConfigError, Problem


def test_a_problem_and_a_config_error_survive_pickling():
    problem = Problem("RT_RANK_GAP", "ranks 0, 2: rank 1 is missing", "server_list[0]", "warning")
    assert pickle.loads(pickle.dumps(problem)) == problem
    error = pickle.loads(pickle.dumps(ConfigError("no such job", code="TRACKING_JOB")))
    assert isinstance(error, ConfigError) and error.exit_code == 2
    assert error.problems == [Problem("TRACKING_JOB", "no such job")]
    assert str(error) == "[TRACKING_JOB]: no such job"
