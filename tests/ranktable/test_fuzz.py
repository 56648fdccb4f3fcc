"""Hypothesis: the parser and the .env reader raise nothing but the project's own errors."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.ranktable.samples import TABLE_4P, table_dict
from platform_plugin import ranktable, settings
from platform_plugin.errors import ConfigError, PlatformPluginError

FUZZ = hsettings(deadline=None, max_examples=150,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 40), st.floats(allow_nan=True),
                    st.text(max_size=8), st.sampled_from(["0", "1", "7", "15", "16", "-1", " 3",
                                                         "192.168.1.1", "completed", ""]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20)
KEYS = ["version", "server_count", "server_list", "server_id", "device", "device_id",
        "device_ip", "rank_id", "status", "group_list", "instance_list", "devices", "pod_name",
        "board_id"]


def _check(doc) -> None:
    table, problems = ranktable.parse(doc)
    assert all(p.code.startswith("RT_") for p in problems)
    if table is not None:
        for problem in ranktable.validate(table):
            assert problem.code.startswith("RT_") and problem.message
        try:
            server = ranktable.select_server(table, local_addresses=set())
        except ranktable.RankTableError as exc:  # ambiguous or empty: said with RT_ codes
            assert exc.problems and all(p.code.startswith("RT_") for p in exc.problems)
        else:
            assert server in table.servers
        found = ranktable.check_environment(table, {
            "RANK_ID": "4", "RANK_START": "0", "RANK_SIZE": "x", "DEVICE_ID": "4",
            "ASCEND_RT_VISIBLE_DEVICES": "4,5"})
        # RANK_SIZE=x is never an integer: at least that is reported, every finding with a code
        assert any(p.code == "RT_ENV_NOT_INTEGER" for p in found), found
        assert all(p.code.startswith("RT_") and p.message for p in found)


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6))
def test_parser_survives_any_json_object(doc):
    _check(doc)


@FUZZ
@given(st.data())
def test_parser_survives_mutated_real_tables(data):
    """Replace one value anywhere in a valid table by an arbitrary JSON value."""
    doc = table_dict(servers=data.draw(st.integers(1, 3)), cards=data.draw(st.integers(1, 8)))
    target, key = doc, None
    for _ in range(data.draw(st.integers(1, 4))):
        if isinstance(target, dict) and target:
            key = data.draw(st.sampled_from(sorted(target)))
        elif isinstance(target, list) and target:
            key = data.draw(st.integers(0, len(target) - 1))
        else:
            break
        if not isinstance(target[key], (dict, list)):
            break
        target = target[key]
    if key is not None and isinstance(target, (dict, list)):
        try:
            target[key] = data.draw(json_values)
        except (IndexError, TypeError, KeyError):
            pass
    _check(doc)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_parser_survives_any_text(raw):
    table, problems = ranktable.parse(raw)
    assert table is not None or problems


@FUZZ
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=300))
def test_settings_survive_any_dotenv_content(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("env")
    (folder / ".env").write_text(content, encoding="utf-8")
    for mode in settings.MODES:
        try:
            resolved = settings.resolve(mode, environ={"RANK_TABLE_FILE": str(TABLE_4P)},
                                        cwd=str(folder), local_addresses=set())
        except ConfigError as exc:
            assert exc.problems
            continue
        resolved.process_env()
        assert all(isinstance(v, str) for v in resolved.process_env().values())


@FUZZ
@given(st.dictionaries(st.sampled_from(["RANK_ID", "RANK_START", "RANK_SIZE", "DEVICE_ID",
                                        "RANK_TABLE_FILE", "ASCEND_RT_VISIBLE_DEVICES",
                                        "PLATFORM_RUN_MODE", "OTHER"]),
                       st.one_of(st.text(max_size=6), st.integers(0, 20).map(str)), max_size=5),
       st.binary(max_size=100))
def test_settings_survive_any_environment_and_binary_dotenv(tmp_path_factory, environ, raw):
    folder = tmp_path_factory.mktemp("envb")
    (folder / ".env").write_bytes(raw)
    try:
        resolved = settings.resolve(None, environ=environ, cwd=str(folder), local_addresses=set())
    except PlatformPluginError as exc:  # refused: a ConfigError whose findings have codes
        assert isinstance(exc, ConfigError) and exc.problems
        assert all(p.code.startswith(("ENV_", "RT_")) and p.message for p in exc.problems)
    else:
        assert resolved.mode in settings.MODES
        assert all(isinstance(v, str) for v in resolved.process_env().values())


def test_fuzz_strategies_reach_valid_tables():
    # guard: the mutation fuzz starts from tables the parser accepts
    assert ranktable.validate(ranktable.parse(json.dumps(table_dict(3, 8)))[0]) == []
