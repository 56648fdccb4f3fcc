"""`platform-run server add-user` refuses, with a code and nothing created, where there is no
server to add the user to (the running server with authentication is tested in
test_server_command.py)."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import clean_env


def _add_user(data) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platform_plugin", "server", "add-user", "bob",
                           "--data-dir", str(data)], capture_output=True, text=True,
                          env=clean_env(), timeout=60)


def test_add_user_without_a_server_with_authentication_there_is_refused(tmp_path):
    done = _add_user(tmp_path)
    assert done.returncode == 2 and "[SERVER_NO_AUTH]" in done.stderr, done.stderr
    (tmp_path / "mlflow-auth.json").write_text(json.dumps(
        {"admin_username": "admin", "admin_password": "p" * 20, "secret_key": "k" * 20}))
    done = _add_user(tmp_path)  # credentials but no server serving from the folder
    assert done.returncode == 2 and "[SERVER_NOT_RUNNING]" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "p" * 20 not in done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow-auth.json"]


def test_a_server_without_flask_wtf_is_refused_unless_no_auth(tmp_path, monkeypatch):
    """Flask-WTF (MLflow's basic-auth app needs it) is installed here: its absence is stood in
    by hiding it from the check, in-process. Refused before any folder or cluster exists."""
    import importlib.util

    from tests.cli.helpers import run_inprocess
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "flask_wtf" else real(name, *a))
    data = tmp_path / "data"
    outcome = run_inprocess(["server", "--port", "0", "--host", "0.0.0.0", "--data-dir",
                             str(data)], tmp_path)
    assert outcome.refused_cleanly() and "[SERVER_AUTH_UNAVAILABLE]" in outcome.text, outcome
    assert "--no-auth" in outcome.text and not data.exists()
