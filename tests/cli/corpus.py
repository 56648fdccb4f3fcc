"""The fuzz corpus: hostile rank tables, .env files, CLI arguments and notebooks.

Deterministic (a fixed seed): a failure names its case, and the same case fails again. Every
case is (id, files to write into an empty working folder, argv, expect) where expect is
"refuse" (exit 2 with an error code) or "any" (exit 0, or a refusal). No case may print a
traceback, hang, or leave anything in the working folder.
"""
from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field

from tests.ranktable.samples import table_dict

SEED = 20261130
MISSING_PROGRAM = "no-such-program-xyz"  # a launch that gets past every check is refused here
BIG = "9" * 5000  # over Python's int() limit
HOSTILE_TEXT = [
    "", " ", "-1", "1e5", "0x10", "+3", "3.0", "١٢", "nan", "inf", "-inf", BIG, "9" * 19,
    "\u0000", "a\u0000b", "x" * 10000, "ä", "💥", "../../x;$(touch y)", "$(id)", "`id`", "a b",
    "-rf", "/", ".", "..", "~", "C:\\x", "\n", "'\"", "%s%n", "{}", "[]", "null", "true",
]
HOSTILE_JSON = [None, True, False, 0, -1, 1.5, 1e308, [], {}, [[]], {"a": {}}, "\uffff"] + \
    HOSTILE_TEXT[:20]
SERVER_IDS = ["../../x;$(touch y)", "$(id)", "a b", "-rf", "x" * 300, "1.2.3.4.5", "::1",
              "localhost", "host_name", "ä.example", "10.0.0.01", "", " ", "a..b", ".", "1.2.3",
              "fe80::1%eth0", "a\u0000b", "10.0.0.1\n", "*"]
ENV_KEYS = ["RANK_START", "RANK_ID", "DEVICE_ID", "RANK_SIZE", "RANK_TABLE_FILE",
            "PLATFORM_RUN_MODE", "ASCEND_RT_VISIBLE_DEVICES", "PLATFORM_LOG_DIR", "X", "PATH"]


@dataclass
class Case:
    id: str
    argv: list
    files: dict = field(default_factory=dict)  # relative path -> str | bytes | dict (JSON)
    expect: str = "any"  # "refuse" | "any"
    code: str = ""  # the refusal's code, when the case knows it


def _mutate(doc: dict, rnd: random.Random) -> dict:
    """Replace one value anywhere in `doc` by a hostile one."""
    doc = copy.deepcopy(doc)
    parent, key = None, None
    target = doc
    for _ in range(rnd.randint(1, 4)):
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if not keys:
            break
        parent, key = target, rnd.choice(keys)
        if not isinstance(target[key], (dict, list)) or rnd.random() < 0.3:
            break
        target = target[key]
    if parent is not None:
        parent[key] = rnd.choice(HOSTILE_JSON)
    return doc


def rank_table_cases(rnd: random.Random) -> list[Case]:
    cases, docs = [], []
    for i in range(160):
        docs.append((f"mutated-{i}", _mutate(table_dict(servers=rnd.randint(1, 2),
                                                        cards=rnd.randint(1, 8)), rnd)))
    for i, sid in enumerate(SERVER_IDS):
        doc = table_dict(servers=1, cards=2)
        doc["server_list"][0]["server_id"] = sid
        docs.append((f"server-id-{i}", doc))
    for field_name in ("rank_id", "device_id", "device_ip"):
        for j, value in enumerate([BIG, "-1", "1" * 19, "00000000000000000000001"]):
            doc = table_dict(servers=1, cards=2)
            doc["server_list"][0]["device"][0][field_name] = value
            docs.append((f"field-{field_name}-{j}", doc))
    raw = {"not-json": "{", "top-list": "[]", "top-number": "1", "top-null": "null",
           "unquoted-big": '{"server_count": ' + BIG + "}", "deep": "[" * 5000 + "]" * 5000,
           "bom": "\ufeff" + json.dumps(table_dict()), "empty": "", "nul": "\u0000",
           "truncated": json.dumps(table_dict())[:200], "group-list-bad": '{"group_list": 5}',
           "board": '{"board_id": "0x0000", "group_count": "1", "group_list": []}'}
    files = [(name, text) for name, text in raw.items()]
    files.append(("bad-utf8", b"\xff\xfe{\x00"))
    for name, doc in docs:
        files.append((name, doc))
    for n, (name, content) in enumerate(files):
        command = [["ranktable", "check", "t.json"], ["ranktable", "show", "t.json"],
                   ["ranktable", "check", "--json", "t.json"],
                   ["ranktable", "show", "--json", "t.json"]][n % 4]
        cases.append(Case(f"ranktable-{name}", command, {"t.json": content}))
        if n % 3 == 0:  # the same table reaching the launcher and the env resolution
            cases.append(Case(f"ranktable-launch-{name}", ["launch", "--rank-table", "t.json",
                                                            "--", MISSING_PROGRAM],
                              {"t.json": content}, "refuse"))
            cases.append(Case(f"ranktable-env-{name}", ["env"],
                              {"t.json": content, ".env": "RANK_TABLE_FILE=t.json\n"}))
    cases.append(Case("ranktable-merge-bad", ["ranktable", "merge", "a.json", "b.json"],
                      {"a.json": "{", "b.json": "[]"}))
    for j, spec in enumerate(["", "0-99999999", "[0,8", "8-0", "17", "0,0,0", "1-" + BIG, "a",
                              "0," * 70 + "0", "[5,5)"]):
        cases.append(Case(f"generate-devices-{j}", ["ranktable", "generate", "--devices", spec,
                                                     "--hccn-conf", "h.conf", "--server-ip",
                                                     "10.0.0.1"],
                          {"h.conf": "".join(f"address_{d}=192.168.1.{d}\n" for d in range(16))}))
    table = table_dict(servers=1, cards=2)
    for j, out in enumerate(["afile/t.json", "/proc/x/t.json", "missing/deeper/t.json"]):
        cases.append(Case(f"ranktable-output-{j}", ["ranktable", "show", "t.json", "-o", out],
                          {"t.json": table, "afile": "x"}, "refuse"))
        cases.append(Case(f"generate-output-{j}", ["ranktable", "generate", "--devices", "0",
                                                    "--hccn-conf", "h.conf", "--server-ip",
                                                    "10.0.0.1", "-o", out],
                          {"h.conf": "address_0=192.168.1.1\n", "afile": "x"}, "refuse"))
    for j, sid in enumerate(SERVER_IDS[:8]):
        valid = sid in ("::1", "localhost")
        cases.append(Case(f"generate-server-ip-{j}", ["ranktable", "generate", "--hccn-conf",
                                                       "h.conf", "--server-ip", sid],
                          {"h.conf": "address_0=192.168.1.1\n"}, "any" if valid else "refuse"))
    return cases


def env_cases(rnd: random.Random) -> list[Case]:
    cases = []
    raw = {"nul": b"A=1\nB=x\x00y\n", "bad-utf8": b"A=\xff\xfe\n", "huge-file": b"A=" + b"a" * (2 << 20),
           "long-value": b"A=" + b"a" * (200 * 1024) + b"\n", "only-equals": b"=\n=\n",
           "no-equals": b"JUSTAKEY\n", "quotes": b"A='unterminated\n", "export": b"export A=1\n",
           "crlf": b"A=1\r\nB=2\r\n", "interp": b"A=${B}\nB=${A}\n", "binary": bytes(range(1, 256))}
    for name, content in raw.items():
        cases.append(Case(f"env-raw-{name}", ["env"], {".env": content}))
        cases.append(Case(f"env-raw-launch-{name}", ["launch", "--nproc", "1", "--",
                                                      MISSING_PROGRAM], {".env": content}, "refuse"))
    for i in range(200):
        lines = [f"{rnd.choice(ENV_KEYS)}={rnd.choice(HOSTILE_TEXT).replace(chr(10), '')}"
                 for _ in range(rnd.randint(1, 3))]
        files = {".env": "\n".join(lines) + "\n"}
        command = [["env"], ["env", "--json"], ["doctor"], ["launch", "--nproc", "1", "--",
                                                             MISSING_PROGRAM]][i % 4]
        cases.append(Case(f"env-{i}", command, files, "refuse" if command[0] == "launch" else "any"))
    return cases


LAUNCH_BAD_NUMBERS = [
    ("--grace", "nan"), ("--grace", "-1"), ("--grace", "inf"), ("--timeout", "nan"),
    ("--timeout", "-5"), ("--timeout", "0"), ("--silence-timeout", "nan"),
    ("--silence-timeout", "-1"), ("--max-lines-per-sec", "nan"), ("--max-lines-per-sec", "-3"),
    ("--master-port", "70000"), ("--master-port", "-1"), ("--nproc", "99999999999"),
    ("--nproc", "10000"), ("--nproc", "0"), ("--nproc", "-2"), ("--show", "999"),
    ("--show", "0,999"), ("--show", "x"), ("--nnodes", "0"), ("--node-rank", "-2"),
    ("--node-rank", "7"), ("--rank-start", BIG), ("--nproc", BIG), ("--master-port", BIG),
    ("--timeout", "1e999"), ("--grace", "1e999"), ("--backend", "mpi"), ("--tracking", "x"),
    ("--mode", "prod"), ("--job-name", "a/b"), ("--job-name", "j" * 300), ("--job-name", ""),
    ("--log-dir", "afile"), ("--cache-dir", "afile"), ("--log-dir", "afile/sub"),
    ("--rank-table", "missing.json"), ("--rank-table", "afile"), ("--master-addr", ""),
    ("--master-addr", "../../x;$(touch y)"), ("--master-addr", "a b"),
]
VALUES = ["nan", "inf", "-1", "0", "1", "2", "1e309", "99999999999", "", "x", BIG[:30], "💥",
          "0x1f", " 3", "3 ", "1_000"]


# what Python's int()/float() take but no doc writes (util/numbers.py refuses them all): a launch
# with `--nproc 1_000` started 1,000 ranks
BAD_NUMBERS = ["1_000", "\uff12", "\u0661\u0662", "+1", " 2", "2 ", "0x10", "nan", "-nan", "inf",
               "-inf", "1e999", "", "\u00b2", "1,5", "9" * 41, BIG]
BAD_WHOLE_NUMBERS = BAD_NUMBERS + ["1e3", "2.0", "9" * 19, "- 1", "--1"]
# paths no folder can be made at: empty, a NUL, a name over 255 bytes, over PATH_MAX, too deep
BAD_PATHS = ["", "a\u0000b", "n" * 300, "a/" * 2500, "a/" * 300, "a\nb", "\x1b[2Jclear"]


def parser_flags(accepts) -> list[tuple[list[str], str, object, list[str]]]:
    """(command words, flag, its argparse type, the positionals it needs) for every flag of
    every `platform-run` command (sub-commands too) whose type `accepts`: a flag added later
    is found here, and the corpus tries it."""
    import argparse

    from platform_plugin.cli import COMMANDS, build_parser
    found: list = []

    def walk(parser, words):
        needs = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, words + [name])
            elif not action.option_strings and action.nargs == argparse.REMAINDER:
                needs += ["--", MISSING_PROGRAM]
            elif not action.option_strings and action.nargs not in ("?", "*"):
                needs.append("x")
        for action in parser._actions:
            if action.option_strings and accepts(action.type):
                found.append((words, action.option_strings[0], action.type, needs))

    for name, _module, _help in COMMANDS:
        top = build_parser([name])
        commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        walk(commands.choices[name], [name])
    return found


def number_flag_cases() -> list[Case]:
    """Every number flag of every command, each with what its reading refuses."""
    from platform_plugin.launcher.options import FIELDS, flags_of
    kinds = {"int": int, "float": float}
    from platform_plugin.util.numbers import NumberArgument
    cases = []
    flags = [(words, flag, (kind.kind, kind.code, kind.infinite), needs) for words, flag, kind, needs
             in parser_flags(lambda t: isinstance(t, NumberArgument)) if words != ["launch"]]
    # the launch options from their record (some read words of their own too: --nproc auto)
    for name, f in FIELDS.items():
        kind = kinds.get(str(f.type).replace("Optional[", "").rstrip("]"))
        if f.metadata["cli"] and kind is not None:
            flags.append((["launch"], flags_of(name)[0], (kind, f.metadata["code"], False), []))
    for words, flag, (kind, code, infinite), needs in flags:
        values = BAD_WHOLE_NUMBERS if kind is int else BAD_NUMBERS
        for j, value in enumerate(values):
            if value == "inf" and infinite:  # `sync --wait inf`: documented
                continue
            given = f"{flag}={value}"  # one word: `-inf` is no flag to argparse then
            argv = [*words, given, *needs]
            if words == ["launch"]:  # with a program that runs: a value let through is no refusal
                argv = ["launch", "--tracking", "none", *(["--nproc", "1"] if flag != "--nproc"
                                                          else []), given, "--", "true"]
            cases.append(Case(f"number-{'-'.join(words)}{flag}-{j}", argv, {}, "refuse", code))
    return cases


def path_flag_cases() -> list[Case]:
    from platform_plugin.util.paths import PathArgument
    cases = []
    for words, flag, kind, needs in parser_flags(lambda t: isinstance(t, PathArgument)):
        for j, value in enumerate(BAD_PATHS):
            cases.append(Case(f"path-{'-'.join(words)}{flag}-{j}", [*words, flag, value, *needs],
                              {}, "refuse", kind.code))
    from platform_plugin.launcher.options import FIELDS, flags_of
    for name, f in FIELDS.items():  # the launch options' folders and files, checked by the record
        if f.metadata["cli"] and f.metadata["code"] == "LAUNCH_PATH":
            cases += [Case(f"path-launch-{name}-{j}", ["launch", "--tracking", "none", "--nproc",
                                                       "1", flags_of(name)[0], value, "--", "true"],
                           {}, "refuse", "LAUNCH_PATH") for j, value in enumerate(BAD_PATHS)]
    for command in ("sync", "compare"):  # the JOB argument
        cases += [Case(f"path-{command}-job-{j}", [command, value], {}, "refuse", "CLI_PATH")
                  for j, value in enumerate(BAD_PATHS[1:])]
    return cases


def cli_cases(rnd: random.Random) -> list[Case]:
    cases = []
    afile = {"afile": "x"}
    for j, (flag, value) in enumerate(LAUNCH_BAD_NUMBERS):
        # with a program that runs: the bad value itself must be refused
        # (--tracking none first: a value that slipped through runs a short job, no MLflow)
        nproc = [] if flag == "--nproc" else ["--nproc", "1"]
        cases.append(Case(f"launch-bad-{j}{flag}", ["launch", "--tracking", "none", *nproc, flag,
                                                     value, "--", "true"], dict(afile), "refuse"))
    flags = [f for f, _ in LAUNCH_BAD_NUMBERS]
    for i in range(160):
        argv = ["launch"]
        for _ in range(rnd.randint(1, 4)):
            argv += [rnd.choice(flags), rnd.choice(VALUES)]
        # every program here is refused: whatever the options, nothing may start
        argv += ["--", rnd.choice([MISSING_PROGRAM, "", "./afile", "/", "python"])]
        if argv[-1] == "python":
            argv.append("missing_script.py")
        cases.append(Case(f"launch-random-{i}", argv, dict(afile), "refuse"))
    for j, port in enumerate(["99999", "-1", "65536", "1e3", "x", "", BIG[:25], "nan"]):
        cases.append(Case(f"ui-port-{j}", ["ui", "--port", port], {}, "refuse"))
    for j, store in enumerate(["http://127.0.0.1:1", "https://x"]):
        cases.append(Case(f"ui-store-{j}", ["ui", "--port", "99999", "--store", store], {},
                          "refuse"))
    odd = [["--nonsense"], ["launch"], ["launch", "--"], ["launch", "--nproc"], ["ranktable"],
           ["ranktable", "check"], ["ranktable", "check", "missing.json"], ["env", "--mode", "x"],
           ["env", "--env-file", "missing.env"], ["doctor", "--rank-table", "missing.json"],
           ["debug"], ["full"], ["debug", "missing.ipynb"], ["sync", "--wait", "nan"],
           ["compare", "--metric"], ["💥"], [""], ["launch", "--nproc", "1", "--", "\x00"]]
    for j, argv in enumerate(odd):
        cases.append(Case(f"odd-{j}", argv, {}, "any"))
    return cases


def job_value_cases() -> list[Case]:
    """Values a launch took (or crashed on after creating platform_logs/): a job id too long
    for a folder, a key file that is a folder, every number variable out of range or unread."""
    launch = ["launch", "--tracking", "none", "--nproc", "1"]
    cases = [Case("job-id-300", [*launch, "--job-id", "j" * 300, "--", "true"], {}, "refuse",
                  "LAUNCH_JOB_ID"),
             Case("job-id-nul", [*launch, "--job-id", "a\u0000b", "--", "true"], {}, "refuse",
                  "LAUNCH_JOB_ID"),
             Case("job-id-newline", [*launch, "--job-id", "a\nb", "--", "true"], {}, "refuse",
                  "LAUNCH_JOB_ID"),
             Case("job-key-folder", [*launch, "--nnodes", "2", "--master-port", "29999",
                                     "--job-key", "@adir", "--", "true"], {"adir/x": "k"},
                  "refuse", "LAUNCH_JOB_KEY"),
             Case("job-key-nul", [*launch, "--nnodes", "2", "--master-port", "29999",
                                  "--job-key", "@a\u0000b", "--", "true"], {}, "refuse",
                  "LAUNCH_JOB_KEY")]
    for name in ("PLATFORM_RENDEZVOUS_TIMEOUT", "PLATFORM_HEARTBEAT_TIMEOUT",
                 "PLATFORM_CONTROL_PORT", "PLATFORM_TRACKING_DRAIN_TIMEOUT",
                 "PLATFORM_WFLOGGER_CALL_TIMEOUT", "PLATFORM_JOB_ID"):
        for j, value in enumerate(["-5", "1_000", "nan", "0x10", "j" * 120_000]):
            if name == "PLATFORM_JOB_ID" and j < 4:
                continue  # names, not numbers: only the length is wrong
            cases.append(Case(f"variable-{name}-{j}", [*launch, "--", "true"],
                              {".env": f"{name}={value}\n"}, "refuse",
                              "LAUNCH_JOB_ID" if name == "PLATFORM_JOB_ID" else ""))
    return cases


def _notebook(rnd: random.Random, i: int):
    cell = {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "x = 1",
            "outputs": [], "execution_count": None, "id": "p"}
    doc = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {
        "name": "python3", "language": "python", "display_name": "Python 3"}}, "cells": [cell]}
    variants = [
        lambda d: d["metadata"].update(kernelspec="python3"),
        lambda d: d["metadata"].pop("kernelspec"),
        lambda d: d["metadata"].update(kernelspec={"name": rnd.choice(HOSTILE_TEXT[:12])}),
        lambda d: d["metadata"].update(kernelspec=rnd.choice(HOSTILE_JSON)),
        lambda d: d.update(nbformat=rnd.choice([3, 5, 99, "4", None])),
        lambda d: d.update(cells=rnd.choice(HOSTILE_JSON)),
        lambda d: d["cells"][0].update(source=rnd.choice(HOSTILE_JSON)),
        lambda d: d.update(metadata=rnd.choice(HOSTILE_JSON)),
    ]
    variants[i % len(variants)](doc)
    return doc


def notebook_cases(rnd: random.Random) -> list[Case]:
    cases = []
    for i in range(24):  # each costs a kernel-spec lookup (~0.3 s on a loaded machine)
        mode = ["debug", "full"][i % 2]
        argv = [mode, "nb.ipynb", "--dry-run"] + (["--no-cleanup"] if mode == "full" else [])
        cases.append(Case(f"notebook-{i}", argv, {"nb.ipynb": _notebook(rnd, i)}))
    good = _notebook(random.Random(0), 0)
    options = [["--timeout", "nan"], ["--timeout", "-1"], ["--timeout", "inf"],
               ["--timeout", "0"], ["--output", "afile/o.ipynb"], ["--output", "nb.ipynb"],
               ["--output", "/proc/x/o.ipynb"], ["--kernel", "nope"], ["--cwd", "afile"],
               ["--profile", "missing.toml"], ["-f", "missing.yaml"], ["--env-file", "missing"],
               ["--profile", "afile"], ["-f", "afile"]]
    for j, extra in enumerate(options):
        cases.append(Case(f"notebook-option-{j}", ["debug", "nb.ipynb", "--dry-run", *extra],
                          {"nb.ipynb": good, "afile": "x = [\n"}, "refuse"))
    raw = {"not-json": "{", "empty": "", "list": "[]", "bad-utf8": b"\xff", "deep": "[" * 3000}
    for name, content in raw.items():
        cases.append(Case(f"notebook-raw-{name}", ["debug", "nb.ipynb", "--dry-run"],
                          {"nb.ipynb": content}, "refuse"))
    return cases


def build() -> list[Case]:
    rnd = random.Random(SEED)
    cases = rank_table_cases(rnd) + env_cases(rnd) + cli_cases(rnd) + notebook_cases(rnd) + \
        number_flag_cases() + path_flag_cases() + job_value_cases()
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return cases
