"""util/record.py: the plain value classes of the launch path behave as the dataclasses they
replace (equality, repr, replace, as_dict, immutability, pickling)."""
from __future__ import annotations

import pickle

import pytest

from platform_plugin.launcher.planning.plan import Host, RankSpec
from platform_plugin.launcher.processes.result import JobResult, JobStatus, RankFailure
from platform_plugin.settings import Setting


def spec(**changes) -> RankSpec:
    values = dict(name="0", rank_id=0, local_rank=0, device_id=0, argv=("python", "t.py"),
                  env={"RANK_ID": "0"}, cwd="/w", log_path="/w/rank_0.log")
    return RankSpec(**{**values, **changes})


def test_a_frozen_record_is_an_immutable_hashable_value():
    a = spec()
    assert a == spec() and a != spec(name="1") and a.role == "worker"
    assert repr(a).startswith("RankSpec(name='0', rank_id=0,")
    with pytest.raises(AttributeError, match="immutable"):
        a.name = "1"
    assert hash(Setting("RANK_ID", "0", "flag")) == hash(Setting("RANK_ID", "0", "flag"))
    assert Host() == Host(base_env={}) and Host().base_env is not Host().base_env


def test_replace_copies_with_changes_and_refuses_unknown_fields():
    a = spec()
    b = a.replace(cwd="/elsewhere", env={**a.env, "X": "1"})
    assert (b.cwd, b.env, b.name) == ("/elsewhere", {"RANK_ID": "0", "X": "1"}, "0")
    assert a.cwd == "/w" and "X" not in a.env
    with pytest.raises(TypeError, match="no field"):
        a.replace(nope=1)


def test_a_mutable_record_round_trips_through_dict_and_pickle():
    cause = RankFailure("1", 1, 1, "h", 42, 3, None, 1.5, last_lines=["boom"], root_cause=True)
    result = JobResult("j", "n", "/logs/j", "plain", JobStatus.FAILED, False, 2.0,
                       {"0": 0, "1": 3}, failures=[cause], root_cause=cause)
    data = result.to_dict()
    assert data["status"] == "failed" and data["failures"][0]["last_lines"] == ["boom"]
    data["failures"][0]["last_lines"].append("changed")  # a copy, as dataclasses.asdict gives
    assert cause.last_lines == ["boom"]
    assert JobResult.from_dict(result.to_dict()) == result
    assert pickle.loads(pickle.dumps(result)) == result
    assert pickle.loads(pickle.dumps(spec())) == spec()
    with pytest.raises(TypeError):
        hash(result)
