"""Every supported Python compiles the whole package and runs the rank side with nothing but
its standard library (`-S`: no site-packages, so no MLflow, numpy or dotenv). The bare
interpreters come from pyenv (or pythonX.Y on PATH); `make test-compat` runs the rest of the
suite on 3.9."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import REPO, clean_env

SUPPORTED = ("3.9", "3.10", "3.11", "3.12")

CHECK = """\
import json, os, pathlib, sys
for path in sorted(pathlib.Path("platform_plugin").rglob("*.py")):
    compile(path.read_text(encoding="utf-8"), str(path), "exec")
from platform_plugin.tracking import get_tracker
import platform_plugin.tracking.integrations.torch  # the torch helper imports torch lazily
tracker = get_tracker()
tracker.log_metric("loss", 0.5)
tracker.close()
spool = pathlib.Path(os.environ["PLATFORM_TRACKING_SPOOL_DIR"], "rank_0.jsonl")
print(json.dumps([sys.version_info[:2], spool.read_text().splitlines()]))
"""


def interpreter(version: str) -> str:
    found = subprocess.run(["bash", str(REPO / "scripts" / "find-python.sh"), version],
                           capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(found.stderr.strip())
    return found.stdout.strip()


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_package_compiles_and_the_rank_side_runs_on(version, tmp_path):
    python = interpreter(version)
    env = clean_env(PYTHONPATH=str(REPO), PLATFORM_TRACKING_SPOOL_DIR=str(tmp_path),
                    RANK_ID="0", PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([python, "-S", "-c", CHECK], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    major_minor, lines = json.loads(result.stdout.splitlines()[-1])
    assert ".".join(map(str, major_minor)) == version
    assert len(lines) == 1 and '"loss",0.5' in lines[0]
