"""`pip install platform-plugin` into the platform's image keeps the image's MindSpore and
numpy: the package's own requirements (no extra) never name MindSpore and leave a numpy < 2
alone. pip's real resolver, run on this checkout in a real venv holding the image's packages
(PyPI or pip's cache); `--dry-run` stops it before it unpacks ~150 packages, which costs
minutes (measured: more than 10 on this 2-core machine while another install ran), and
reports exactly what it would install or replace."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.compat.helpers import fake_wheel, installed, make_venv
from tests.helpers import REPO, clean_env

pytestmark = pytest.mark.slow

IMAGE_MINDSPORE = "2.3.1"  # not what the `mindspore` extra or the locks would pick
IMAGE_NUMPY = "1.26.4"     # a fresh install without the image's numpy would pick numpy 2


def test_pip_install_without_extras_keeps_the_images_mindspore_and_numpy(tmp_path):
    python = make_venv(tmp_path / "image")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    env = clean_env()
    wheel = fake_wheel(tmp_path, "mindspore", IMAGE_MINDSPORE, requires=("numpy>=1.20,<2",))
    subprocess.run([*pip, str(wheel), f"numpy=={IMAGE_NUMPY}"], check=True, env=env)
    before = installed(python)
    assert (before["mindspore"], before["numpy"]) == (IMAGE_MINDSPORE, IMAGE_NUMPY)

    report = tmp_path / "report.json"
    result = subprocess.run([*pip, "--dry-run", "--report", str(report), str(REPO)],
                            capture_output=True, text=True, env=env, timeout=500)
    assert result.returncode == 0, result.stderr[-3000:]

    would_install = {item["metadata"]["name"].lower(): item["metadata"]["version"]
                     for item in json.loads(report.read_text())["install"]}
    assert "platform-plugin" in would_install and "mlflow" in would_install  # it resolved
    assert "numpy" not in would_install and "mindspore" not in would_install, would_install
    assert installed(python) == before
