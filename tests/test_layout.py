"""The tree keeps its design: imports point down only and make no cycle, no module imports
another's private name, no folder grows past 20 modules, ranks import only tracking's rank side,
the CLI's help and a rank load no heavy library, and every PLATFORM_* name has one owner."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, clean_env

PACKAGE = REPO / "platform_plugin"

# Layers, top to bottom. A module may import its own layer or any layer below it.
LAYERS = [
    ("entry", ("platform_plugin", "platform_plugin.__main__", "platform_plugin.magics",
               "platform_plugin.cli")),
    ("workflows", ("platform_plugin.notebook", "platform_plugin.cleanup", "platform_plugin.comparison")),
    ("launcher", ("platform_plugin.launcher",)),
    ("checkpoint", ("platform_plugin.checkpoint",)),
    ("tracking", ("platform_plugin.tracking",)),
    ("facts", ("platform_plugin.settings", "platform_plugin.ranktable", "platform_plugin.doctor",
               "platform_plugin.folder_locks")),
    ("util", ("platform_plugin.util", "platform_plugin.errors", "platform_plugin.variables")),
]
# The rank side of tracking runs inside every training process: the stdlib only (and the
# framework an integration helps), never the rest of the package - but the one reader of files
# others can write (util/regular_file.py, stdlib-only 3.7 code), which a spool's reader uses.
RANK_SIDE = ("platform_plugin.tracking.rank.tracker", "platform_plugin.tracking.rank.spool",
             "platform_plugin.tracking.rank.identity", "platform_plugin.tracking.rank.job_id",
             "platform_plugin.tracking.integrations", "platform_plugin.util.regular_file")
# What every side of tracking shares: the one folder of it the rank side may import
TRACKING_BOTTOM = "platform_plugin.tracking.shared"


def module_name(path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_of(name: str) -> int:
    # the longest matching prefix decides: `platform_plugin` alone is the entry point
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes
                if within(name, (p,))), default=None)
    assert best is not None, f"{name} belongs to no layer: add it to LAYERS"
    return best[1]


def imported_names(path) -> set[tuple[str, str | None]]:
    """(platform_plugin module, name taken from it or None) for every import of a file: top
    level, in functions, for typing."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import module` imports the module; `from module import name`, the module
            found.update((f"{node.module}.{a.name}", None) if f"{node.module}.{a.name}" in known
                         else (node.module, a.name) for a in node.names)
    return {(m, name) for m, name in found if m in known}


def imports_of(path) -> set[str]:
    """Every platform_plugin module a file imports (top level, in functions, for typing)."""
    return {m for m, _ in imported_names(path)}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_no_import_points_up():
    upward = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {i} ({LAYERS[layer_of(i)][0]})"
              for m, targets in graph().items() for i in targets if layer_of(i) < layer_of(m)]
    assert upward == []


def test_the_rank_side_of_tracking_imports_only_itself():
    leaks = [f"{m} imports {i}" for m, targets in graph().items() if within(m, RANK_SIDE)
             for i in targets if not within(i, RANK_SIDE + (TRACKING_BOTTOM,))
             and i != "platform_plugin.tracking"]
    assert leaks == []


def test_the_checkpoint_manifest_imports_nothing_of_the_package():
    """checkpoint/manifest.py runs in every rank, on Python 3.7 too: the stdlib only, and the
    reader of files others can write, which imports nothing of the package either."""
    assert imports_of(PACKAGE / "checkpoint" / "manifest.py") == {"platform_plugin.util.regular_file"}
    assert imports_of(PACKAGE / "util" / "regular_file.py") == set()


def test_tracking_never_imports_the_launcher_nor_settings():
    wrong = [f"{m} imports {i}" for m, targets in graph().items()
             if within(m, ("platform_plugin.tracking",)) for i in targets
             if within(i, ("platform_plugin.launcher", "platform_plugin.settings"))]
    assert wrong == []


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in edges.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return cycles


def is_parent(package: str, module: str) -> bool:
    return module.rpartition(".")[0] == package


def test_no_import_cycle_between_modules():
    """Imports inside functions and for typing count. A package's __init__ re-exporting its own
    modules (and they importing from it) is not a cycle of concern."""
    edges = {m: {t for t in targets if t != m and not is_parent(m, t) and not is_parent(t, m)}
             for m, targets in graph().items()}
    assert import_cycles(edges) == []


def test_no_module_imports_a_private_name_of_another():
    private = [f"{module_name(p)} imports {m}.{name}" for p in PACKAGE.rglob("*.py")
               for m, name in imported_names(p)
               if name and name.startswith("_") and not name.startswith("__")
               and m != module_name(p)]
    assert private == []


def test_no_folder_holds_more_than_20_modules():
    crowded = {}
    for folder in [PACKAGE, *(d for d in PACKAGE.rglob("*") if d.is_dir())]:
        count = sum(1 for f in folder.glob("*.py") if f.name != "__init__.py")
        if count > 20:
            crowded[folder.relative_to(REPO).as_posix()] = count
    assert crowded == {}


def loaded_by(code: str, prefixes: tuple[str, ...] = ("platform_plugin",)) -> list[str]:
    """The modules (and their submodules) of `prefixes` loaded by `code` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps("
                          "sorted(m for m in sys.modules if m.split('.')[0] in "
                          f"{tuple(prefixes)!r} or m.startswith({tuple(prefixes)!r}))))"],
                         capture_output=True, text=True, check=True,
                         env=clean_env(PYTHONPATH=str(REPO)), cwd=REPO)
    return json.loads(out.stdout.splitlines()[-1])


def test_importing_tracking_in_a_rank_loads_only_its_rank_side():
    assert loaded_by("import platform_plugin.tracking") == [
        "platform_plugin", "platform_plugin.tracking"]  # every name loads on first use
    loaded = loaded_by("from platform_plugin.tracking import get_tracker")
    assert [m for m in loaded if not within(m, RANK_SIDE + ("platform_plugin.tracking.rank",))
            and m not in ("platform_plugin", "platform_plugin.tracking", "platform_plugin.util")] == []


def help_of(argv: list[str]) -> str:
    return ("import os, sys\nsys.stdout = open(os.devnull, 'w')\n"
            "from platform_plugin.cli import main\n"
            f"try: main({argv!r})\nexcept SystemExit: pass\nsys.stdout = sys.__stdout__")


# The import budget of what runs most often (docs/benchmarks.md measures its time): the heavy
# libraries none of them needs, and how many of the package's modules each may load (today's
# count with headroom: a budget, not a list).
HEAVY = ("mlflow", "sqlalchemy", "torch", "mindspore", "papermill", "IPython", "matplotlib",
         "psutil", "requests", "numpy", "pandas")
BUDGET = {
    "platform-run --help": (help_of(["--help"]), 8),
    # + numbers, paths, stops (the signal handler), peer_streams (torchrun's stream flags)
    "platform-run launch --help": (help_of(["launch", "--help"]), 15),
    "a rank's get_tracker": ("from platform_plugin.tracking import get_tracker", 10),
}


@pytest.mark.parametrize("case", BUDGET)
def test_the_import_budget_of_the_help_and_of_a_rank(case):
    code, most = BUDGET[case]
    loaded = loaded_by(code, prefixes=("platform_plugin",) + HEAVY)
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    ours = [m for m in loaded if within(m, ("platform_plugin",))]
    assert len(ours) <= most, ours


# What an untracked launch on one server does not need: an HTTP client (a kernel asks its Jupyter
# server for the notebook's name), OpenSSL (the job link's keys: several servers or a rank
# table), ZeroMQ (the job link itself).
NOT_IN_A_PLAIN_LAUNCH = ("urllib.request", "http.client", "ssl", "email", "hashlib", "zmq")


def test_an_untracked_launch_on_one_server_loads_no_http_client_nor_openssl(tmp_path):
    code = help_of(["launch", "--nproc", "1", "--tracking", "none", "--backend", "plain",
                    "--show", "none", "--log-dir", str(tmp_path), "--", sys.executable, "-c",
                    "pass"])
    assert loaded_by(code, prefixes=HEAVY + NOT_IN_A_PLAIN_LAUNCH) == []
    assert len(list(tmp_path.glob("*/job.json"))) == 1  # the job ran


# The rank side of tracking and the lifeline's reaper script run without the package: they read
# their variables with os.environ, by the names declared in variables.py.
OWN_READS = ("variables.py", "tracking/rank/tracker.py", "tracking/rank/identity.py",
             "launcher/processes/reaper.py", "checkpoint/manifest.py")


def test_every_platform_variable_has_one_owner():
    from platform_plugin.variables import VARIABLES

    names, direct = set(), []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"\bPLATFORM_[A-Z_]+[A-Z]\b", text))
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in OWN_READS and re.search(r"""(environ|env)(\.get\(|\[)["']PLATFORM_""", text):
            direct.append(rel)
    python_names = {"PLATFORM_VARS", "PLATFORM_VARIABLES", "PLATFORM_JOB_VARIABLES"}  # tuples
    assert names - python_names - set(VARIABLES) == set()
    assert direct == []


# A module holds one concern whatever its length: past this many lines, look whether it holds
# several (an alarm, not a reason to split one concern in two). Functions stay short.
MODULE_SMELL_LINES = 700


def test_no_module_over_the_smell_alarm_and_no_function_over_60():
    too_long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(REPO)
        if text.count("\n") > MODULE_SMELL_LINES:
            too_long.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    too_long.append(f"{rel}:{node.lineno} {node.name}() {length} lines")
    assert too_long == []


def test_no_function_needs_more_than_7_arguments():
    """State goes on an object (launcher/job.py's Job and Attempt), not through argument lists:
    no function needs more than 7 arguments its caller must pass (self and defaults aside)."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
                a = node.args
                required = (len(a.posonlyargs) + len(a.args) - len(a.defaults)
                            + sum(d is None for d in a.kw_defaults)
                            - (bool(a.args) and a.args[0].arg in ("self", "cls")))
                if required > 7:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}({required})")
    assert long == []
