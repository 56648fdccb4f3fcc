"""The tree keeps its design: imports point down only, ranks import only tracking's rank side,
the CLI imports only the chosen command, and every PLATFORM_* name has one owner."""
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
    ("tracking", ("platform_plugin.tracking",)),
    ("facts", ("platform_plugin.settings", "platform_plugin.settings_table",
               "platform_plugin.ranktable", "platform_plugin.doctor")),
    ("util", ("platform_plugin.util", "platform_plugin.errors", "platform_plugin.variables")),
]
# The rank side of tracking runs inside every training process: the stdlib only (and the
# framework an integration helps), never the rest of the package.
RANK_SIDE = ("platform_plugin.tracking.rank.tracker", "platform_plugin.tracking.rank.spool",
             "platform_plugin.tracking.rank.identity", "platform_plugin.tracking.rank.job_id",
             "platform_plugin.tracking.integrations")


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


def imports_of(path) -> set[str]:
    """Every platform_plugin module a file imports (top level, in functions, for typing)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import module` imports the module; `from module import name`, the module
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                         else node.module for a in node.names)
    return {m for m in found if m in known}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_no_import_points_up():
    upward = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {i} ({LAYERS[layer_of(i)][0]})"
              for m, targets in graph().items() for i in targets if layer_of(i) < layer_of(m)]
    assert upward == []


def test_the_rank_side_of_tracking_imports_only_itself():
    leaks = [f"{m} imports {i}" for m, targets in graph().items() if within(m, RANK_SIDE)
             for i in targets if not within(i, RANK_SIDE + ("platform_plugin.tracking",))]
    assert leaks == []


def test_tracking_never_imports_the_launcher_nor_settings():
    wrong = [f"{m} imports {i}" for m, targets in graph().items()
             if within(m, ("platform_plugin.tracking",)) for i in targets
             if within(i, ("platform_plugin.launcher", "platform_plugin.settings"))]
    assert wrong == []


def loaded_by(code: str, prefixes=("platform_plugin", "dotenv", "mlflow")) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps("
                          f"sorted(m for m in sys.modules if m.startswith({tuple(prefixes)!r}))))"],
                         capture_output=True, text=True, check=True,
                         env=clean_env(PYTHONPATH=str(REPO)), cwd=REPO)
    return json.loads(out.stdout.splitlines()[-1])


def test_importing_tracking_in_a_rank_loads_only_its_rank_side():
    assert loaded_by("import platform_plugin.tracking") == [
        "platform_plugin", "platform_plugin.tracking"]  # every name loads on first use
    assert loaded_by("from platform_plugin.tracking import get_tracker") == [
        "platform_plugin", "platform_plugin.tracking", "platform_plugin.tracking.rank",
        "platform_plugin.tracking.rank.identity",
        "platform_plugin.tracking.rank.spool", "platform_plugin.tracking.rank.tracker"]


@pytest.mark.parametrize("argv, allowed", [
    (["--help"], {"platform_plugin", "platform_plugin.cli", "platform_plugin.errors"}),
    (["launch", "--help"], {"platform_plugin", "platform_plugin.cli", "platform_plugin.errors",
                            "platform_plugin.cli.launch", "platform_plugin.launcher",
                            "platform_plugin.launcher.options", "platform_plugin.variables"}),
])
def test_the_cli_imports_only_the_chosen_command(argv, allowed):
    assert set(loaded_by(help_of(argv))) == allowed


def help_of(argv: list[str]) -> str:
    return ("import os, sys\nsys.stdout = open(os.devnull, 'w')\n"
            "from platform_plugin.cli import main\n"
            f"try: main({argv!r})\nexcept SystemExit: pass\nsys.stdout = sys.__stdout__")


# What the help of the CLI must not import: each of these cost several ms (dataclasses pulls in
# inspect, ast, dis, tokenize; shutil pulls in bz2, lzma, zlib), and the help needs none of them.
HEAVY_STDLIB = ("dataclasses", "typing", "inspect", "shutil", "difflib", "signal", "subprocess",
                "importlib.util", "pathlib")  # (not json: loaded_by itself uses it)


@pytest.mark.parametrize("argv", [["--help"], ["launch", "--help"]])
def test_the_cli_help_imports_no_heavy_stdlib_module(argv):
    loaded = loaded_by(help_of(argv), prefixes=HEAVY_STDLIB)
    assert [m for m in loaded if m in HEAVY_STDLIB] == []


# The rank side of tracking and the lifeline's reaper script run without the package: they read
# their variables with os.environ, by the names declared in variables.py.
OWN_READS = ("variables.py", "tracking/rank/tracker.py", "tracking/rank/identity.py", "launcher/processes/reaper.py")


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


def test_no_module_over_400_lines_and_no_function_over_60():
    too_long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(REPO)
        if text.count("\n") > 400:
            too_long.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    too_long.append(f"{rel}:{node.lineno} {node.name}() {length} lines")
    assert too_long == []


# What `platform-run launch --tracking none` of a plain job loads, and nothing more: the rank
# table package, the delivery side of tracking, the job link of multi-server jobs, system
# metrics, stack dumps, the torch store are imported only by the jobs that use them (without
# .pyc every module of the package is compiled at each start: about 1.2 ms per 100 lines).
# Spawn first: what runs before the first process of the job (the lifeline) is spawned. The rest
# of LAUNCH_PATH (the supervisor, the output, job.json, the result, the sweep: launcher/watch.py)
# is imported after the ranks were spawned, so its compile overlaps their start.
BEFORE_SPAWN = {"platform_plugin", "platform_plugin.cli", "platform_plugin.cli.launch",
                "platform_plugin.errors", "platform_plugin.variables", "platform_plugin.settings",
                "platform_plugin.tracking", "platform_plugin.tracking.rank.job_id",
                "platform_plugin.launcher"} | {
    f"platform_plugin.launcher.{m}" for m in (
        "api", "backends", "job_key", "link", "options", "plan", "preflight", "quiet", "show",
        "spawn")} | {
    f"platform_plugin.util.{m}" for m in ("code_lock", "folders", "hosts", "jobdirs", "record")} | {
    "platform_plugin.util"}
LAUNCH_PATH = BEFORE_SPAWN | {f"platform_plugin.launcher.{m}" for m in (
    "chatter", "jobfile", "output", "reaper", "result", "supervisor", "watch")} | {
    "platform_plugin.util.procfs", "platform_plugin.util.json_text", "platform_plugin.tracking.job.report"}
# What only a job that fails, hangs, restarts or writes on a full disk needs: a successful launch
# never compiles these (the supervisor's stop and failure records, the failure table and its
# text table, the stack dumps, the other servers' notices and the restart records, job.json's
# full-disk fallback)
FAILURE_ONLY = {f"platform_plugin.launcher.{m}" for m in (
    "rank_failure", "result_table", "stacks", "attempts", "jobfile_in_place", "stopping")} | {
    "platform_plugin.util.texttable"}
# stdlib modules a plain launch does without (each costs milliseconds to import; `typing`: import
# it under `if TYPE_CHECKING:` with `TYPE_CHECKING = False`, annotations are strings anyway;
# `dataclasses`: util/record.py's plain classes instead, see there)
LAUNCH_STDLIB_NOT = ("logging", "socket", "pathlib", "shutil", "tempfile", "hashlib", "uuid",
                     "typing", "dataclasses", "inspect",
                     "ipaddress", "urllib", "concurrent", "difflib")


def test_an_untracked_launch_loads_only_the_launch_path(tmp_path):
    argv = ["launch", "--nproc", "1", "--tracking", "none", "--backend", "plain", "--show",
            "none", "--log-dir", str(tmp_path), "--", sys.executable, "-c", "pass"]
    code = ("import os, sys\nsys.stdout = open(os.devnull, 'w')\n"
            f"from platform_plugin.cli import main\nassert main({argv!r}) == 0\n"
            "sys.stdout = sys.__stdout__\n"
            "assert 'json' not in sys.modules  # job.json: util/json_text.py")  # (loaded_by: json)
    assert set(loaded_by(code)) == LAUNCH_PATH
    assert loaded_by(code, prefixes=LAUNCH_STDLIB_NOT) == []


@pytest.mark.parametrize("exit_code", [0, 3])
def test_only_a_failed_launch_loads_what_reports_a_failure(tmp_path, exit_code):
    """The success path does without FAILURE_ONLY; a failed job loads its table from there (so
    this test would notice if the failure table moved back onto the success path's modules)."""
    rank = f"import os, sys; sys.exit({exit_code} if os.environ['RANK_ID'] == '1' else 0)"
    argv = ["launch", "--nproc", "2", "--tracking", "none", "--backend", "plain", "--show",
            "none", "--log-dir", str(tmp_path), "--", sys.executable, "-c", rank]
    code = ("import os, sys\nsys.stdout = sys.stderr = open(os.devnull, 'w')\n"
            f"from platform_plugin.cli import main\nassert main({argv!r}) == {min(exit_code, 1)}\n"
            "sys.stdout = sys.__stdout__")
    loaded = set(loaded_by(code)) & FAILURE_ONLY
    if exit_code == 0:
        assert loaded == set()
    else:
        assert loaded == {"platform_plugin.launcher.processes.rank_failure", "platform_plugin.launcher.processes.stopping",
                          "platform_plugin.launcher.display.result_table", "platform_plugin.util.texttable"}


def test_an_untracked_launch_spawns_before_it_imports_what_watches_the_ranks(tmp_path):
    """The modules loaded when the first process of the job (the lifeline) is spawned: the audit
    hook stops the launch there (nothing is left: the job folder is all it made)."""
    argv = ["launch", "--nproc", "1", "--tracking", "none", "--backend", "plain", "--show",
            "none", "--log-dir", str(tmp_path), "--", sys.executable, "-c", "pass"]
    code = ("import os, sys\nsys.stdout = open(os.devnull, 'w')\n"
            "class Spawned(BaseException): pass\n"
            "def hook(event, args):\n"
            "    if event == 'subprocess.Popen': raise Spawned\n"
            "sys.addaudithook(hook)\n"
            f"from platform_plugin.cli import main\ntry: main({argv!r})\nexcept Spawned: pass\n"
            "sys.stdout = sys.__stdout__")
    assert set(loaded_by(code)) == BEFORE_SPAWN
