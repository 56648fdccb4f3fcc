"""generate / merge building blocks: hccn.conf, device specs, warnings, refusals."""
from __future__ import annotations

import pytest

from tests.ranktable.samples import (HCCN_CONF, TABLE_2S, TABLE_4P, codes, mutated, sample,
    write_json)
from platform_plugin import ranktable
from platform_plugin.ranktable import tools as ranktable_tools
from platform_plugin.ranktable import RankTableError


@pytest.mark.parametrize("spec, expected", [
    ("0-7", list(range(8))), ("[0,8)", list(range(8))), ("[4,8)", [4, 5, 6, 7]),
    ("[0,7]", list(range(8))), ("(0,3]", [1, 2, 3]), ("3, 1,2", [1, 2, 3]), ("5", [5]),
    ("[0,16)", list(range(16))),  # hccl_tools turns this into [0,1)
])
def test_parse_devices(spec, expected):
    assert ranktable_tools.parse_devices(spec) == expected


@pytest.mark.parametrize("spec", ["", "a-b", "[8,4)", "0-16", "[0,17)", "1;2"])
def test_parse_devices_refuses(spec):
    with pytest.raises(RankTableError) as err:
        ranktable_tools.parse_devices(spec)
    assert codes(err.value.problems) == {"RT_DEVICES_SPEC"}


def test_hccn_conf_reading():
    addresses = ranktable_tools.read_hccn_conf(str(HCCN_CONF))
    assert addresses[0] == "192.168.100.101" and addresses[7] == "192.168.103.100"
    with pytest.raises(RankTableError) as err:
        ranktable_tools.parse_hccn_conf("address_0=192.168.1.1\naddress_1=999.1.1.1\n")
    assert codes(err.value.problems) == {"RT_HCCN_ADDRESS"}


def test_generate_warns_about_cross_group_subsets_and_loopback():
    doc, warnings = ranktable_tools.generate(devices="[3,6)", hccn_conf=str(HCCN_CONF),
                                             server_ip="127.0.0.1")
    assert codes(warnings) == {"RT_CROSS_GROUP", "RT_SERVER_LOOPBACK"}
    assert [d["device_id"] for d in doc["server_list"][0]["device"]] == ["3", "4", "5"]
    _doc, clean = ranktable_tools.generate(devices="0-3", hccn_conf=str(HCCN_CONF),
                                           server_ip="10.0.0.1")
    assert clean == []


def test_generate_default_server_ip_resolves_this_host():
    doc, _ = ranktable_tools.generate(devices="0-1", hccn_conf=str(HCCN_CONF))
    assert doc["server_list"][0]["server_id"] == ranktable_tools.default_server_ip()


def test_generate_visible_devices_past_the_end_is_refused():
    with pytest.raises(RankTableError) as err:
        ranktable_tools.generate(devices="0-4", hccn_conf=str(HCCN_CONF), server_ip="10.0.0.1",
                                 visible_devices="4,5,6,7")
    assert "visible" in str(err.value)


def test_merge_refuses_unfinished_inputs_and_nothing(tmp_path):
    pending = write_json(tmp_path / "p.json", mutated(sample(TABLE_4P),
                                                      lambda d: d.update(status="initializing")))
    with pytest.raises(RankTableError) as err:
        ranktable_tools.merge([str(pending)])
    assert codes(err.value.problems) == {"RT_STATUS"} and str(pending) in str(err.value)
    with pytest.raises(RankTableError) as err:
        ranktable_tools.merge([])
    assert codes(err.value.problems) == {"RT_MERGE_EMPTY"}


def test_merge_renumbers_badly_numbered_inputs(tmp_path):
    shuffled = mutated(sample(TABLE_2S), lambda d: d["server_list"].reverse())  # RT_RANK_ORDER
    merged = ranktable_tools.merge([str(write_json(tmp_path / "s.json", shuffled))])
    table, problems = ranktable.parse(merged)
    assert problems == [] and ranktable.validate(table) == []
    assert table.servers[0].server_id == "10.0.0.2" and table.servers[0].first_rank == 0


def test_default_file_names_follow_hccl_tools():
    assert ranktable_tools.default_file_name(sample(TABLE_4P)) == TABLE_4P.name
    assert ranktable_tools.default_file_name(sample(TABLE_2S)) == TABLE_2S.name


def test_bad_visible_devices_value_is_explained():
    with pytest.raises(RankTableError) as err:
        ranktable.runtime_device_id(4, "4;5")
    assert codes(err.value.problems) == {"RT_VISIBLE_DEVICES"}
