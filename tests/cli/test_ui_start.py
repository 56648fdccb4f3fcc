"""`platform-run ui` says it is starting before it waits for the MLflow server: the server's start
takes seconds (a minute on a loaded machine), and the command printed nothing meanwhile. A real
`mlflow server` on a scratch sqlite store, on a free loopback port."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env

pytestmark = pytest.mark.slow


def test_ui_says_it_is_starting_then_gives_the_link(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ui = subprocess.Popen([str(Path(sys.executable).with_name("platform-run")), "ui", "--port", "0",
                           "--store", store], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, cwd=tmp_path, env=clean_env(), start_new_session=True)
    try:
        first = ui.stdout.readline()
        assert first.startswith("starting the MLflow UI on http://127.0.0.1:"), first
        assert f"(store {store})" in first
        port = first.split("http://127.0.0.1:", 1)[1].split()[0]
        second = ui.stdout.readline()  # once the server answers
        assert second.startswith(f"MLflow UI: http://127.0.0.1:{port}  (store {store}"), second
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # `platform-run ui` stops its server on SIGTERM
        ui.wait(60)
