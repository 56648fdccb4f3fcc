"""`platform-run env|ranktable|doctor` as a user runs them: real subprocesses, real exit codes."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.helpers import VENV_BIN
from tests.ranktable.samples import (HCCN_CONF, TABLE_2S, TABLE_4P, TABLE_8P, mutated,
    rank_processes, sample, write_json)

CLEAN = {k: v for k, v in os.environ.items()
         if not k.startswith(("RANK_", "DEVICE_", "PLATFORM_", "ASCEND_", "JOB_ID"))}


def platform_run(*args, env=None, cwd=None):
    return subprocess.run([str(VENV_BIN / "platform-run"), *map(str, args)], capture_output=True,
                          text=True, env={**CLEAN, **(env or {})}, cwd=cwd, timeout=120)


def test_check_valid_table_exits_0():
    out = platform_run("ranktable", "check", TABLE_2S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK:") and "16 rank(s)" in out.stdout


def test_check_invalid_table_exits_2_listing_every_problem(tmp_path):
    doc = mutated(sample(TABLE_2S), lambda d: (d.update(server_count="3", status="pending"),
                                               d["server_list"][1]["device"][0].update(rank_id="3")))
    out = platform_run("ranktable", "check", write_json(tmp_path / "t.json", doc))
    assert out.returncode == 2
    for code in ("RT_SERVER_COUNT", "RT_STATUS", "RT_RANK_DUPLICATE", "RT_RANK_GAP"):
        assert code in out.stdout
    report = json.loads(platform_run("ranktable", "check", "--json", tmp_path / "t.json").stdout)
    assert not report["valid"] and len(report["problems"]) >= 4


def test_check_with_env_explains_the_seed_error():
    out = platform_run("ranktable", "check", "--env", TABLE_4P,
                       env={"RANK_ID": "4", "DEVICE_ID": "4"})
    assert out.returncode == 2
    assert "RANK_ID=4 is not a rank" in out.stdout and "set RANK_ID=0" in out.stdout
    # the check to run again is this one, with the environment, not the table alone
    assert f"run `platform-run ranktable check --env {TABLE_4P}` again" in out.stdout


def test_check_missing_file_is_a_configuration_error(tmp_path):
    out = platform_run("ranktable", "check", tmp_path / "none.json")
    assert out.returncode == 2 and "RT_FILE_MISSING" in out.stderr
    assert "Traceback" not in out.stderr


def test_show_prints_servers_ranks_and_devices():
    out = platform_run("ranktable", "show", TABLE_4P)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[1].split() == ["server_id", "RANK_START", "rank_id", "device_id", "device_ip"]
    assert lines[3].split()[:4] == ["10.0.0.1", "0", "0", "4"]


def test_show_json_converts_group_list(ranktables, tmp_path):
    out = platform_run("ranktable", "show", "--json", "-o", tmp_path / "v1.json",
                       ranktables / "v0_group_list_16p.json")
    assert out.returncode == 0
    converted = json.loads((tmp_path / "v1.json").read_text())
    expected = json.loads((ranktables / "v0_converted_to_v1_16p.json").read_text())
    for server in converted["server_list"]:
        assert server.pop("host_nic_ip") == "reserve"
    assert converted == expected


def test_generate_matches_hccl_tools_output():
    out = platform_run("ranktable", "generate", "--hccn-conf", HCCN_CONF, "--devices", "4-7",
                       "--server-ip", "10.0.0.1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == sample(TABLE_4P)  # the sample is hccl_tools output
    eight = platform_run("ranktable", "generate", "--hccn-conf", HCCN_CONF, "--devices", "[0,8)",
                         "--server-ip", "10.0.0.1")
    assert json.loads(eight.stdout) == sample(TABLE_8P)


def test_generate_through_visible_devices_and_sixteen_cards(tmp_path):
    out = platform_run("ranktable", "generate", "--hccn-conf", HCCN_CONF, "--devices", "[0,4)",
                       "--visible-devices", "4,5,6,7", "--server-ip", "10.0.0.1")
    assert json.loads(out.stdout) == sample(TABLE_4P)
    conf = tmp_path / "hccn16.conf"
    conf.write_text("".join(f"address_{i}=10.1.{i}.1\nnetmask_{i}=255.255.255.0\n"
                            for i in range(16)))
    out = platform_run("ranktable", "generate", "--hccn-conf", conf, "--devices", "[0,16)",
                       "--server-ip", "10.0.0.1")
    devices = json.loads(out.stdout)["server_list"][0]["device"]
    assert [d["rank_id"] for d in devices] == [str(i) for i in range(16)]  # not hccl_tools' [0,1)


@pytest.mark.parametrize("args, code", [
    (["--devices", "0-8"], "RT_HCCN_DEVICE"),
    (["--devices", "[0,17)"], "RT_DEVICES_SPEC"),
    (["--devices", "zero"], "RT_DEVICES_SPEC"),
])
def test_generate_refuses_bad_requests(args, code):
    out = platform_run("ranktable", "generate", "--hccn-conf", HCCN_CONF, "--server-ip",
                       "10.0.0.1", *args)
    assert out.returncode == 2 and code in out.stderr


def test_generate_without_hccn_conf_says_what_to_pass(tmp_path):
    out = platform_run("ranktable", "generate", "--hccn-conf", tmp_path / "absent.conf")
    assert out.returncode == 2 and "--hccn-conf" in out.stderr


def test_generate_into_a_folder_uses_the_hccl_tools_file_name(tmp_path):
    out = platform_run("ranktable", "generate", "--hccn-conf", HCCN_CONF, "--devices", "4-7",
                       "--server-ip", "10.0.0.1", "-o", tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / TABLE_4P.name).read_text()) == sample(TABLE_4P)


def test_merge_renumbers_ranks_like_merge_hccl(tmp_path):
    second = mutated(sample(TABLE_8P), lambda d: (d["server_list"][0].update(server_id="10.0.0.2"),
                                                  [dev.update(device_ip=dev["device_ip"].replace(
                                                      "192.168", "192.169"))
                                                   for dev in d["server_list"][0]["device"]]))
    b = write_json(tmp_path / "b.json", second)
    out = platform_run("ranktable", "merge", TABLE_8P, b, "-o", tmp_path / "m.json")
    assert out.returncode == 0, out.stderr
    merged = json.loads((tmp_path / "m.json").read_text())
    assert merged["server_count"] == "2" and merged["status"] == "completed"
    assert [d["rank_id"] for s in merged["server_list"] for d in s["device"]] == [
        str(i) for i in range(16)]
    assert platform_run("ranktable", "check", tmp_path / "m.json").returncode == 0
    clash = platform_run("ranktable", "merge", TABLE_8P, TABLE_8P)
    assert clash.returncode == 2 and "RT_SERVER_ID_DUPLICATE" in clash.stderr


def test_env_shows_values_and_sources(tmp_path):
    (tmp_path / ".env").write_text("RANK_ID=2\nMY_FLAG=1\n")
    out = platform_run("env", env={"RANK_TABLE_FILE": str(TABLE_4P)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[1:3] for line in out.stdout.splitlines()[3:]
            if line and not line.startswith(("warning", "-"))}
    assert rows["RANK_ID"] == ["2", ".env"]
    assert rows["DEVICE_ID"] == ["6", "derived"]
    assert rows["RANK_SIZE"] == ["4", "derived"]
    exported = platform_run("env", "--export", env={"RANK_TABLE_FILE": str(TABLE_4P)}, cwd=tmp_path)
    assert "export MY_FLAG=1" in exported.stdout and "export DEVICE_ID=6" in exported.stdout


def test_env_full_run_conflict_exits_2_naming_both_values(tmp_path):
    (tmp_path / ".env").write_text("RANK_START=8\n")
    out = platform_run("env", "--mode", "full", env={"RANK_TABLE_FILE": str(TABLE_2S),
                                                     "RANK_START": "0"}, cwd=tmp_path)
    assert out.returncode == 2
    assert "RANK_START='0' from the platform" in out.stderr and "RANK_START='8' from .env" in out.stderr


def test_doctor_runs_on_a_machine_without_npus(tmp_path):
    out = platform_run("doctor", "--rank-table", TABLE_4P, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin"})
    rows = {}
    for line in out.stdout.splitlines():
        parts = line.split(None, 2)
        if parts and parts[0] in ("OK", "WARN", "FAIL", "SKIP"):
            rows.setdefault(parts[1] if parts[1] != "running" else "running ranks", parts[0])
    assert rows["npu-smi"] == "SKIP" and rows["last"] == "SKIP"
    assert rows["rank"] == "OK" and rows["env"] == "OK"
    assert out.returncode == 0, out.stdout  # SKIP and WARN rows do not fail


def test_doctor_fails_on_the_seed_error(tmp_path):
    out = platform_run("doctor", env={"RANK_TABLE_FILE": str(TABLE_4P), "RANK_ID": "4"},
                       cwd=tmp_path)
    assert out.returncode == 1
    assert "FAIL  variables" in out.stdout
    assert out.stdout.count("looks like a device_id") == 1  # reported once, not per check


def test_doctor_reports_duplicate_ranks_of_real_processes(tmp_path):
    table = write_json(tmp_path / "job_table.json", sample(TABLE_4P))  # unique: isolates our ranks
    base = {"RANK_TABLE_FILE": str(table), "RANK_START": "0"}
    with rank_processes([{**base, "RANK_ID": "0", "DEVICE_ID": "4"},
                         {**base, "RANK_ID": "0", "DEVICE_ID": "4"}]):
        out = platform_run("doctor", "--json", "--rank-table", table, cwd=tmp_path)
    rows = json.loads(out.stdout)
    failing = [r["detail"] for r in rows if r["status"] == "FAIL"]
    assert out.returncode == 1
    assert any("same launch runs twice" in d for d in failing)
    assert any("NPU 4 is used by 2" in d for d in failing)
    assert any("missing rank(s) 1, 2, 3" in d for d in failing)


def test_check_wait_polls_until_the_platform_finishes_the_table(tmp_path):
    import threading
    import time
    path = write_json(tmp_path / "t.json", mutated(sample(TABLE_4P),
                                                   lambda d: d.update(status="initializing")))
    assert platform_run("ranktable", "check", path).returncode == 2

    def finish():
        time.sleep(1.0)
        write_json(path, sample(TABLE_4P))
    writer = threading.Thread(target=finish)
    writer.start()
    out = platform_run("ranktable", "check", "--wait", "60", path)
    writer.join()
    assert out.returncode == 0, out.stdout
