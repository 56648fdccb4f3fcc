"""Helpers for the notebook-run and cleanup tests: build notebooks, run `platform-run`,
build cleanup trees."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat

from tests.helpers import REPO, clean_env  # noqa: F401  (re-exported for the notebook tests)



IPYKERNEL = "Python 3 (ipykernel)"  # the display name of ipykernel's python3 kernel


def make_notebook(path: Path, cells: list[str], *, parameters: str | None = None,
                  kernel: str = "python3", display_name: str | None = None) -> Path:
    """A notebook with an optional `parameters`-tagged first cell; `display_name`: the
    kernel's as JupyterLab shows it (default: its name)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": display_name or kernel,
                                 "language": "python"}
    if parameters is not None:
        cell = nbformat.v4.new_code_cell(parameters)
        cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    nb.cells.extend(nbformat.v4.new_code_cell(source) for source in cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def platform_run(*args: str, cwd: Path, env: dict[str, str] | None = None,
                 timeout: float = 240) -> subprocess.CompletedProcess:
    """`platform-run ARGS` as a real subprocess (the venv's interpreter)."""
    return subprocess.run([sys.executable, "-m", "platform_plugin", *args], cwd=cwd,
                          env=env if env is not None else clean_env(), capture_output=True,
                          text=True, timeout=timeout)


def read_output(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def stream_text(nb: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if o.output_type == "stream")


def cell_statuses(nb: nbformat.NotebookNode) -> list[str]:
    return [c.metadata.get("papermill", {}).get("status") for c in nb.cells
            if c.cell_type == "code"]


def error_names(nb: nbformat.NotebookNode) -> list[str]:
    return [o.ename for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.output_type == "error"]


def run_outputs(project: Path) -> list[Path]:
    return sorted((project / "runs").glob("*.ipynb"))


def write_tree(root: Path, files: dict[str, str | bytes]) -> None:
    """Create files (parents included) from {relative path: content}."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def snapshot(root: Path) -> set[str]:
    """Every path below root (files, dirs, links), relative, without following links."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            found.add(os.path.relpath(os.path.join(dirpath, name), root))
    return found
