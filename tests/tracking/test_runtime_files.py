"""Files the package reads from folders others may write, beyond jobs and checkpoints: the
Jupyter runtime folder's `jpserver-<pid>.json` (a kernel asks its server for the notebook's
name) and the cleanup's rule files. Each goes through util/regular_file.py: a FIFO planted in a
file's place never blocks the reader (before: `open()` waited for a writer for good), a link is
not followed, and the other files are still read."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from platform_plugin.cleanup.run import load_categories
from platform_plugin.errors import ConfigError
from platform_plugin.tracking.shared.jupyter_session import jupyter_servers


def _without_hanging(call, fifos: list[Path]):
    """call() in a thread: its result, or a failure when it blocked (the FIFOs are then opened
    for writing, which frees it)."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        for fifo in fifos:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        thread.join(30)
        pytest.fail(f"{call} blocked on a FIFO")
    return outcome


def test_a_fifo_or_a_link_in_the_jupyter_runtime_folder_is_skipped_without_blocking(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    me = os.getpid()  # this process counts as its own ancestor (util/procfs.ancestors)
    os.mkfifo(runtime / "jpserver-1.json")
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"pid": me, "url": "http://127.0.0.1:1/planted/"}))
    (runtime / "jpserver-2.json").symlink_to(outside)
    (runtime / "jpserver-3.json").write_text(json.dumps({"pid": me, "url": "http://127.0.0.1:2/"}))
    (runtime / "jpserver-4.json").write_text("[" * 200_000)  # too deep: skipped, no RecursionError
    outcome = _without_hanging(lambda: jupyter_servers({"JUPYTER_RUNTIME_DIR": str(runtime)}),
                               [runtime / "jpserver-1.json"])
    assert "error" not in outcome, outcome
    assert [server["url"] for server in outcome["value"]] == ["http://127.0.0.1:2/"]


def test_a_fifo_or_a_link_in_place_of_a_cleanup_rule_file_is_refused_without_blocking(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "caches.toml").write_text('category = "caches"\ndirectories = ["__pycache__"]\nfiles = []\n')
    assert set(load_categories(rules)) == {"caches"}
    os.mkfifo(rules / "planted.toml")
    outcome = _without_hanging(lambda: load_categories(rules), [rules / "planted.toml"])
    error = outcome.get("error")
    assert isinstance(error, ConfigError) and error.problems[0].code == "CLEAN_RULES", outcome
    assert "planted.toml" in str(error) and "not a regular file" in str(error)
    (rules / "planted.toml").unlink()
    outside = tmp_path / "outside.toml"
    outside.write_text('category = "everything"\ndirectories = ["*"]\nfiles = ["*"]\n')
    (rules / "planted.toml").symlink_to(outside)
    with pytest.raises(ConfigError) as refused:
        load_categories(rules)
    assert refused.value.problems[0].code == "CLEAN_RULES" and "is a link" in str(refused.value)
    (rules / "planted.toml").unlink()
    (rules / "planted.toml").write_text("files = " + "[" * 200_000)  # tomllib: a RecursionError
    with pytest.raises(ConfigError) as refused:
        load_categories(rules)
    assert refused.value.problems[0].code == "CLEAN_RULES" and "deeper" in str(refused.value)
