"""Rank tables: every sample parses, every rule has a failing example, conversions, server choice."""
from __future__ import annotations

import json
import threading
import time

import pytest

from tests.ranktable.samples import (SAMPLES, TABLE_2S, TABLE_4P, codes, mutated, sample,
    table_dict, write_json)
from platform_plugin import ranktable
from platform_plugin.errors import errors_only
from platform_plugin.ranktable import RankTableError


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_parses_to_a_table(path):
    table, problems = ranktable.parse_file(str(path))
    assert table is not None, problems
    assert table.rank_size in (4, 8, 16)
    assert sorted(d.rank_id for s in table.servers for d in s.devices) == list(
        range(table.rank_size))
    assert table.path == str(path)


@pytest.mark.parametrize("name", ["hccl_2s_16p.json", "hccl_4p_4567_10.0.0.1.json",
                                  "hccl_8p_01234567_10.0.0.1.json", "v0_converted_to_v1_16p.json"])
def test_hccl_1_0_samples_are_valid(ranktables, name):
    table = ranktable.load(str(ranktables / name))
    assert table.version == "1.0" and table.converted_from is None


def test_group_list_converts_to_the_published_1_0_table(ranktables):
    converted, problems = ranktable.parse_file(str(ranktables / "v0_group_list_16p.json"))
    expected = ranktable.load(str(ranktables / "v0_converted_to_v1_16p.json"))
    assert converted.converted_from == "group_list"
    assert converted.servers == expected.servers  # pod-0 first: ranks 0-7 on 10.19.1.142
    assert codes(problems) == {"RT_CONVERTED"} and not errors_only(problems)
    assert ranktable.validate(converted) == []


def test_legacy_board_format_is_recognised_with_how_to_regenerate(ranktables):
    path = str(ranktables / "legacy_board_8p.json")
    table, problems = ranktable.parse_file(path)
    assert table.converted_from == "board" and table.rank_size == 8
    (problem,) = problems
    assert problem.code == "RT_LEGACY_FORMAT" and "ranktable generate" in problem.message
    with pytest.raises(RankTableError) as err:
        ranktable.load(path)
    assert codes(err.value.problems) == {"RT_LEGACY_FORMAT"}


def _set(path, value):
    """A mutation that sets doc[path...] = value ("server_list.0.device.1.rank_id")."""
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]

    def change(doc):
        target = doc
        for key in keys[:-1]:
            target = target[key]
        if value is DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return change


DELETE = object()
TWO = table_dict(servers=2, cards=4)

# rule code -> (a table that breaks exactly that rule, the JSON path the problem must name)
FAILING_EXAMPLES = {
    "RT_JSON": ('{"version": "1.0", ', ""),
    "RT_NOT_OBJECT": ("[1, 2]", ""),
    "RT_UNKNOWN_FORMAT": ({"servers": []}, ""),
    "RT_NOT_STRING": (mutated(TWO, _set("server_list.0.device.1.rank_id", 1)),
                      "server_list[0].device[1].rank_id"),
    "RT_NOT_INTEGER": (mutated(TWO, _set("server_list.1.device.0.device_id", "x1")),
                       "server_list[1].device[0].device_id"),
    "RT_MISSING_FIELD": (mutated(TWO, _set("server_list.0.device.2.rank_id", DELETE)),
                         "server_list[0].device[2].rank_id"),
    "RT_WRONG_TYPE": (mutated(TWO, _set("server_list", {"a": 1})), "server_list"),
    "RT_VERSION": (mutated(TWO, _set("version", "0.9")), "version"),
    "RT_SERVER_COUNT": (mutated(TWO, _set("server_count", "3")), "server_count"),
    "RT_NO_SERVERS": (mutated(TWO, lambda d: d.update(server_list=[], server_count="0")),
                      "server_list"),
    "RT_SERVER_ID_EMPTY": (mutated(TWO, _set("server_list.1.server_id", " ")),
                           "server_list[1].server_id"),
    "RT_SERVER_ID_DUPLICATE": (mutated(TWO, _set("server_list.1.server_id", "10.0.0.1")),
                               "server_list[1].server_id"),
    "RT_NO_DEVICES": (mutated(table_dict(1, 4), lambda d: d["server_list"].append(
        {"server_id": "10.0.0.9", "device": []}) or d.update(server_count="2")),
        "server_list[1].device"),
    "RT_TOO_MANY_DEVICES": (table_dict(1, 17), "server_list[0].device"),
    "RT_DEVICE_ID_RANGE": (mutated(TWO, _set("server_list.0.device.3.device_id", "16")),
                           "server_list[0].device[3].device_id"),
    "RT_DEVICE_ID_DUPLICATE": (mutated(TWO, _set("server_list.0.device.1.device_id", "0")),
                               "server_list[0].device[1].device_id"),
    "RT_DEVICE_IP_MISSING": (mutated(TWO, _set("server_list.1.device.2.device_ip", DELETE)),
                             "server_list[1].device[2].device_ip"),
    "RT_DEVICE_IP_INVALID": (mutated(TWO, _set("server_list.1.device.2.device_ip", "192.1.2")),
                             "server_list[1].device[2].device_ip"),
    "RT_DEVICE_IP_DUPLICATE": (mutated(TWO, _set("server_list.1.device.0.device_ip",
                                                 TWO["server_list"][0]["device"][0]["device_ip"])),
                               "server_list[1].device[0].device_ip"),
    "RT_RANK_DUPLICATE": (mutated(TWO, _set("server_list.1.device.3.rank_id", "6")),
                          "server_list[1].device[3].rank_id"),
    "RT_RANK_GAP": (mutated(TWO, _set("server_list.1.device.3.rank_id", "6")), "server_list"),
    "RT_RANK_OUT_OF_RANGE": (mutated(TWO, _set("server_list.1.device.3.rank_id", "8")),
                             "server_list[1].device[3].rank_id"),
    "RT_RANK_ORDER": (mutated(TWO, lambda d: d["server_list"].reverse()), "server_list[0].device"),
    "RT_STATUS": (mutated(TWO, _set("status", "initializing")), "status"),
    "RT_GROUP_COUNT": ({"group_list": [], "status": "completed"}, "group_list"),
    "RT_LEGACY_FORMAT": ({"board_id": "0x0000", "group_list": []}, "board_id"),
}


@pytest.mark.parametrize("code", sorted(FAILING_EXAMPLES))
def test_every_rule_has_a_failing_example(code):
    doc, path = FAILING_EXAMPLES[code]
    table, problems = ranktable.parse(doc if isinstance(doc, str) else json.dumps(doc))
    if table is not None:
        problems = problems + ranktable.validate(table)
    hits = [p for p in problems if p.code == code]
    assert hits, f"{code} not reported; got {[str(p) for p in problems]}"
    assert hits[0].path == path
    assert hits[0].severity == "error" and len(hits[0].message) > 20


def test_every_rule_in_the_registry_is_exercised():
    rule_codes = {"RT_SERVER_COUNT", "RT_NO_SERVERS", "RT_SERVER_ID_EMPTY", "RT_SERVER_ID_DUPLICATE",
                  "RT_NO_DEVICES", "RT_TOO_MANY_DEVICES", "RT_DEVICE_ID_RANGE",
                  "RT_DEVICE_ID_DUPLICATE", "RT_DEVICE_IP_MISSING", "RT_DEVICE_IP_INVALID",
                  "RT_DEVICE_IP_DUPLICATE", "RT_RANK_DUPLICATE", "RT_RANK_GAP",
                  "RT_RANK_OUT_OF_RANGE", "RT_RANK_ORDER", "RT_STATUS"}
    import inspect
    source = "".join(inspect.getsource(rule) for rule in ranktable.RULES)
    assert {c for c in rule_codes if f'"{c}"' in source} == rule_codes
    assert rule_codes <= set(FAILING_EXAMPLES)


def test_load_lists_all_problems_at_once(tmp_path):
    doc = mutated(TWO, lambda d: (d.update(server_count="5", status="pending"),
                                  d["server_list"][1].update(server_id="10.0.0.1")))
    with pytest.raises(RankTableError) as err:
        ranktable.load(str(write_json(tmp_path / "t.json", doc)))
    assert codes(err.value.problems) == {"RT_SERVER_COUNT", "RT_STATUS", "RT_SERVER_ID_DUPLICATE"}
    assert err.value.exit_code == 2


def test_single_server_table_needs_no_device_ip():
    doc = mutated(table_dict(1, 2), lambda d: [dev.pop("device_ip")
                                               for dev in d["server_list"][0]["device"]])
    table, problems = ranktable.parse(doc)
    assert problems == [] and ranktable.validate(table) == []


def test_seed_error_message_explains_device_id_used_as_rank_id():
    table = ranktable.load(str(TABLE_4P))
    (problem,) = ranktable.check_environment(table, {"RANK_ID": "4", "DEVICE_ID": "4"})
    assert problem.code == "RT_ENV_RANK_ID"
    assert "valid rank_ids are 0-3" in problem.message
    assert "looks like a device_id" in problem.message
    assert "physical device 4 has rank_id 0" in problem.message
    assert "set RANK_ID=0" in problem.message


@pytest.mark.parametrize("environ, code", [
    ({"RANK_SIZE": "8"}, "RT_ENV_RANK_SIZE"),
    ({"RANK_START": "2"}, "RT_ENV_RANK_START"),
    ({"RANK_ID": "1", "DEVICE_ID": "1"}, "RT_ENV_DEVICE_ID"),
    ({"RANK_ID": "x"}, "RT_ENV_NOT_INTEGER"),
    ({"RANK_ID": "1", "DEVICE_ID": "5", "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}, "RT_ENV_DEVICE_ID"),
    ({"RANK_ID": "1", "DEVICE_ID": "1", "ASCEND_RT_VISIBLE_DEVICES": "4,6,7"},
     "RT_DEVICE_NOT_VISIBLE"),
])
def test_environment_rules(environ, code):
    table = ranktable.load(str(TABLE_4P))
    assert code in codes(ranktable.check_environment(table, environ))


def test_environment_consistent_with_table_has_no_problems():
    table = ranktable.load(str(TABLE_4P))
    env = {"RANK_ID": "1", "DEVICE_ID": "5", "RANK_SIZE": "4", "RANK_START": "0"}
    assert ranktable.check_environment(table, env) == []
    visible = {"RANK_ID": "1", "DEVICE_ID": "1", "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}
    assert ranktable.check_environment(table, visible) == []


def test_rank_of_another_server_is_reported():
    table = ranktable.load(str(TABLE_2S))
    problems = ranktable.check_environment(table, {"RANK_START": "8", "RANK_ID": "3"})
    assert codes(problems) == {"RT_ENV_RANK_ID_SERVER"}


def test_device_for_rank_and_runtime_device_id():
    table = ranktable.load(str(TABLE_4P))
    server, device = table.device_for_rank(2)
    assert (server.server_id, device.device_id, device.rank_id) == ("10.0.0.1", 6, 2)
    assert table.device_id_for_rank(2) == 6
    assert table.device_id_for_rank(2, "4,5,6,7") == 2  # runtime numbers visible cards from 0
    assert table.device_id_for_rank(2, "6") == 0
    with pytest.raises(RankTableError) as err:
        table.device_id_for_rank(2, "4,5")
    assert codes(err.value.problems) == {"RT_DEVICE_NOT_VISIBLE"}
    with pytest.raises(RankTableError) as err:
        table.device_for_rank(4)
    assert "looks like a device_id" in err.value.problems[0].message


def test_select_server_by_rank_start_address_or_only_server():
    two = ranktable.load(str(TABLE_2S))
    assert ranktable.select_server(two, rank_start=8).server_id == "10.0.0.2"
    assert ranktable.select_server(two, local_addresses={"10.0.0.1", "127.0.0.1"}).first_rank == 0
    one = ranktable.load(str(TABLE_4P))
    assert ranktable.select_server(one, local_addresses=set()).server_id == "10.0.0.1"


@pytest.mark.parametrize("kwargs, code", [
    ({"local_addresses": set()}, "RT_SERVER_UNKNOWN"),  # never silently server 0
    ({"local_addresses": {"10.0.0.1", "10.0.0.2"}}, "RT_SERVER_UNKNOWN"),
    ({"rank_start": 4}, "RT_ENV_RANK_START"),
])
def test_select_server_refuses_to_guess(kwargs, code):
    with pytest.raises(RankTableError) as err:
        ranktable.select_server(ranktable.load(str(TABLE_2S)), **kwargs)
    assert codes(err.value.problems) == {code}
    assert "RANK_START" in err.value.problems[0].message


def test_host_addresses_are_read_from_this_machine():
    addresses = ranktable.host_addresses()
    assert "127.0.0.1" in addresses  # /proc/net/fib_trie lists loopback as a local address


def test_load_waits_for_status_completed(tmp_path):
    path = write_json(tmp_path / "table.json", mutated(sample(TABLE_4P),
                                                       _set("status", "initializing")))
    with pytest.raises(RankTableError) as err:
        ranktable.load(str(path))
    assert codes(err.value.problems) == {"RT_STATUS"}

    def finish():
        time.sleep(0.3)
        write_json(path, sample(TABLE_4P))
    writer = threading.Thread(target=finish)
    writer.start()
    table = ranktable.load(str(path), wait_timeout=30)
    writer.join()
    assert table.status == "completed"


def test_load_reports_missing_and_unreadable_files(tmp_path):
    with pytest.raises(RankTableError) as err:
        ranktable.load(str(tmp_path / "absent.json"))
    assert codes(err.value.problems) == {"RT_FILE_MISSING"}
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{")
    with pytest.raises(RankTableError) as err:
        ranktable.load(str(bad))
    assert codes(err.value.problems) == {"RT_FILE_UNREADABLE"}


def test_to_hccl_dict_round_trips_a_sample():
    doc = sample(TABLE_2S)
    table, _ = ranktable.parse(doc)
    assert ranktable.to_hccl_dict(table) == doc
