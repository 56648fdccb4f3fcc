"""Helpers of the compat tests: scratch venvs and a stand-in MindSpore distribution."""
from __future__ import annotations

import json
import subprocess
import venv
import zipfile
from pathlib import Path


def make_venv(path: Path) -> Path:
    """A new venv with pip; returns its python."""
    venv.EnvBuilder(with_pip=True, symlinks=True).create(path)
    return path / "bin" / "python"


def fake_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal, valid wheel of `name` whose module records its own version. STAND-IN for the
    image's MindSpore (a real one is ~800 MB and built for the image's CANN): what this test
    checks is what pip does to an installed distribution of that name, not MindSpore itself."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
            name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: platform_plugin-tests\n"
                         "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def installed(python: Path) -> dict[str, str]:
    """{normalised name: version} of what pip sees in that interpreter's environment."""
    out = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out)}
