"""A static check that source stays runnable on Python 3.9, the oldest Python the package
supports (platform images with MindSpore 2.x ship 3.9-3.11), and the rank side on 3.7
(`floor=RANK_FLOOR`).

`make test` runs on 3.11, where code newer than 3.9 works: this check finds what would break
on 3.9 without a 3.9 interpreter. It parses with the 3.9 grammar and walks the tree for the
stdlib names and keywords that appeared in 3.10-3.12, and for the modules 3.12 removed. It knows only what is listed below;
`make test-compat` (the suite on a real 3.9) finds the rest.

    problems = check_file(path)   # ["path:line: what", ...]
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Iterator

FLOOR = (3, 9)

# module -> names added after 3.9
NEWER_NAMES = {
    "datetime": {"UTC"},
    "enum": {"StrEnum", "verify", "EnumCheck", "ReprEnum", "FlagBoundary", "member", "nonmember"},
    "typing": {"TypeAlias", "ParamSpec", "Concatenate", "TypeGuard", "Self", "Never",
               "NotRequired", "Required", "LiteralString", "assert_never", "assert_type",
               "reveal_type", "Unpack", "TypeVarTuple", "dataclass_transform", "override",
               "is_typeddict", "ParamSpecArgs", "ParamSpecKwargs", "TypeAliasType"},
    "itertools": {"pairwise", "batched"},
    "contextlib": {"chdir", "aclosing"},
    "asyncio": {"timeout", "TaskGroup", "Runner", "timeout_at"},
    "hashlib": {"file_digest"},
    "inspect": {"get_annotations"},
    "sys": {"orig_argv", "stdlib_module_names", "exception"},
    "logging": {"getLevelNamesMapping"},
    "dataclasses": {"KW_ONLY"},
    "os": {"process_cpu_count"},
}
NEWER_MODULES = {"tomllib"}  # use platform_plugin.util.toml
# gone in 3.12 (the newest supported Python): importing one fails there
REMOVED_MODULES = {"distutils", "imp", "asynchat", "asyncore", "smtpd"}
SHIMS = {"platform_plugin/util/toml.py"}  # import the newer module behind a version check
NEWER_BUILTINS = {"aiter", "anext", "ExceptionGroup", "BaseExceptionGroup", "EncodingWarning"}
# (call name, keyword) -> what; the call name is the called function's last part
NEWER_KEYWORDS = {
    ("zip", "strict"): "zip(strict=) (3.10)",
    ("dataclass", "slots"): "dataclass(slots=) (3.10)",
    ("dataclass", "kw_only"): "dataclass(kw_only=) (3.10)",
    ("field", "kw_only"): "field(kw_only=) (3.10)",
    ("Popen", "process_group"): "subprocess.Popen(process_group=) (3.11)",
    ("run", "process_group"): "subprocess.run(process_group=) (3.11)",
    ("Popen", "pipesize"): "subprocess.Popen(pipesize=) (3.10)",
    ("rmtree", "onexc"): "shutil.rmtree(onexc=) (3.12)",
    ("glob", "root_dir"): "glob(root_dir=) (3.10)",
    ("iglob", "root_dir"): "glob.iglob(root_dir=) (3.10)",
    ("NamedTemporaryFile", "delete_on_close"): "NamedTemporaryFile(delete_on_close=) (3.12)",
    ("bisect_left", "key"): "bisect(key=) (3.10)",
    ("bisect_right", "key"): "bisect(key=) (3.10)",
    ("insort", "key"): "insort(key=) (3.10)",
}
NEWER_METHODS = {"bit_count": "int.bit_count() (3.10)", "is_junction": "Path.is_junction (3.12)"}
# The rank side is Python 3.7 code (docs/compat.md, launcher/planning/rank_path.py): with
# `floor=(3, 7)` the 3.7 grammar (no `:=`, `/` parameters, f"{x=}") and what 3.8 and 3.9 added
RANK_FLOOR = (3, 7)
NEWER_THAN_37_NAMES = {
    "typing": {"Protocol", "Literal", "TypedDict", "Final", "final", "get_origin", "get_args",
               "runtime_checkable", "SupportsIndex", "Annotated"},
    "functools": {"cached_property", "singledispatchmethod", "cache"},
    "math": {"prod", "isqrt", "dist", "perm", "comb", "lcm", "nextafter", "ulp"},
    "shlex": {"join"},
    "threading": {"get_native_id", "excepthook"},
    "statistics": {"fmean", "geometric_mean", "multimode", "NormalDist"},
    "os": {"waitstatus_to_exitcode", "pidfd_open"},
    "random": {"randbytes"},
    "asyncio": {"to_thread"},
    "sys": {"unraisablehook", "platlibdir", "audit", "addaudithook", "pycache_prefix"},
}
NEWER_THAN_37_MODULES = {"importlib.metadata", "zoneinfo", "graphlib"}
NEWER_THAN_37_KEYWORDS = {
    ("accumulate", "initial"): "itertools.accumulate(initial=) (3.8)",
    ("unlink", "missing_ok"): "Path.unlink(missing_ok=) (3.8)",
    ("copytree", "dirs_exist_ok"): "shutil.copytree(dirs_exist_ok=) (3.8)",
}
NEWER_THAN_37_METHODS = {"removeprefix": "str.removeprefix (3.9)",
                         "removesuffix": "str.removesuffix (3.9)",
                         "is_relative_to": "Path.is_relative_to (3.9)",
                         "with_stem": "Path.with_stem (3.9)"}
BUILTIN_TYPES = {"str", "int", "float", "bool", "bytes", "list", "dict", "tuple", "set",
                 "frozenset", "type", "object", "complex", "bytearray"}


def source_files(root: Path, folders: tuple[str, ...]) -> Iterator[Path]:
    for folder in folders:
        base = root / folder
        if base.is_file():
            yield base
            continue
        yield from sorted(p for p in base.rglob("*.py") if ".venv" not in p.parts)


def check_file(path: Path, *, require_future: bool = False,
               floor: tuple[int, int] = FLOOR) -> list[str]:
    """Problems in one file. `require_future`: every module with code must have
    `from __future__ import annotations` (the package's rule), not only those that need it.
    `floor`: FLOOR, or RANK_FLOOR for the rank side."""
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, str(path), feature_version=floor)
    except SyntaxError as exc:
        return [f"{path}:{exc.lineno}: not Python {floor[0]}.{floor[1]} syntax: {exc.msg}"]
    checker = _Checker(older=floor < FLOOR)
    checker.visit(tree)
    shim = any(path.as_posix().endswith(name) for name in SHIMS)
    problems = [] if shim else [f"{path}:{line}: {what}" for line, what in checker.problems]
    if not _has_future_annotations(tree):
        if checker.union_annotation:
            problems.append(f"{path}:{checker.union_annotation}: `X | Y` annotation without "
                            "`from __future__ import annotations` (evaluated at import on 3.9)")
        elif require_future and _has_code(tree):
            problems.append(f"{path}:1: no `from __future__ import annotations`")
    return problems


def _has_code(tree: ast.Module) -> bool:
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return bool(body)


def _has_future_annotations(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
               and any(alias.name == "annotations" for alias in node.names)
               for node in tree.body)


class _Checker(ast.NodeVisitor):
    def __init__(self, older: bool = False):
        """`older`: also what 3.8 and 3.9 added (the rank side's floor, 3.7)."""
        self.problems: list[tuple[int, str]] = []
        self.union_annotation = 0  # the first line with an `X | Y` annotation
        self.names = {module: NEWER_NAMES.get(module, set()) | (
            NEWER_THAN_37_NAMES.get(module, set()) if older else set())
            for module in set(NEWER_NAMES) | set(NEWER_THAN_37_NAMES)}
        self.modules = NEWER_THAN_37_MODULES if older else set()
        self.keywords = {**NEWER_KEYWORDS, **(NEWER_THAN_37_KEYWORDS if older else {})}
        self.methods = {**NEWER_METHODS, **(NEWER_THAN_37_METHODS if older else {})}
        self.older = older

    def _annotation(self, node: ast.AST | None) -> None:
        if node is not None and not self.union_annotation and any(
                isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for n in ast.walk(node)):
            self.union_annotation = node.lineno

    def _flag(self, node: ast.AST, what: str) -> None:
        self.problems.append((getattr(node, "lineno", 0), what))

    # annotations are strings under `from __future__ import annotations`: not evaluated
    def visit_arg(self, node: ast.arg) -> None:
        self._annotation(node.annotation)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._annotation(node.annotation)
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_FunctionDef(self, node) -> None:
        self._annotation(node.returns)
        for item in node.decorator_list + node.body:
            self.visit(item)
        self.visit(node.args)

    visit_AsyncFunctionDef = visit_FunctionDef

    # the 3.8 syntax, found in the tree: a parser newer than 3.8 does not refuse it for
    # feature_version=(3, 7) (3.9's does not), so the rank side's check cannot rely on that
    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        if self.older:
            self._flag(node, "not Python 3.7 syntax: an assignment expression `:=` (3.8)")
        self.generic_visit(node)

    def visit_arguments(self, node: ast.arguments) -> None:
        if self.older and node.posonlyargs:
            self._flag(node.posonlyargs[0], "not Python 3.7 syntax: positional-only parameters (3.8)")
        self.generic_visit(node)

    def visit_Match(self, node) -> None:  # pragma: no cover - the 3.9 grammar refuses it first
        self._flag(node, "`match` statement (3.10)")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(node, alias.name)

    def _module(self, node: ast.AST, name: str) -> None:
        top = name.split(".")[0]
        if top in NEWER_MODULES:
            self._flag(node, f"module {name} (3.11; use platform_plugin.util.toml)")
        elif top in REMOVED_MODULES:
            self._flag(node, f"module {name} (removed in 3.12)")
        elif any(name == m or name.startswith(m + ".") for m in self.modules):
            self._flag(node, f"module {name} (3.8+)")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0:
            self._module(node, node.module or "")
            for alias in node.names:  # `from importlib import metadata`
                if f"{node.module}.{alias.name}" in self.modules:
                    self._flag(node, f"module {node.module}.{alias.name} (3.8+)")
        for alias in node.names:
            if alias.name in self.names.get(node.module or "", ()):
                self._flag(node, f"from {node.module} import {alias.name} (newer than the floor)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.attr in self.names.get(node.value.id, ()):
            self._flag(node, f"{node.value.id}.{node.attr} (newer than the floor)")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in NEWER_BUILTINS and isinstance(node.ctx, ast.Load):
            self._flag(node, f"builtin {node.id} (3.10+)")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        for keyword in node.keywords:
            if (name, keyword.arg) in self.keywords:
                self._flag(node, self.keywords[(name, keyword.arg)])
        if isinstance(func, ast.Attribute) and func.attr in self.methods:
            self._flag(node, self.methods[func.attr])
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.BitOr) and (_is_type(node.left) or _is_type(node.right)) \
                and not (_is_number_like(node.left) or _is_number_like(node.right)):
            self._flag(node, "`X | Y` of types evaluated at run time (3.10; use Optional/Union "
                             "or a string)")
        self.generic_visit(node)


def _is_type(node: ast.AST) -> bool:
    """None, a builtin type, a CapWords class name or a subscripted generic."""
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Name):
        return node.id in BUILTIN_TYPES or (node.id[:1].isupper() and not node.id.isupper())
    if isinstance(node, ast.Subscript):
        return _is_type(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_type(node.left) or _is_type(node.right)
    return False


def _is_number_like(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int) \
        and not isinstance(node.value, bool)


if __name__ == "__main__":  # python tests/compat/floor.py [files or folders]
    targets = [Path(arg) for arg in sys.argv[1:]] or [Path("platform_plugin")]
    found = [p for t in targets for f in source_files(Path("."), (str(t),))
             for p in check_file(f, require_future=f.parts[0] == "platform_plugin")]
    print("\n".join(found) or "no problem found")
    sys.exit(1 if found else 0)
