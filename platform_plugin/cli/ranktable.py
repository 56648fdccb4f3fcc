"""`platform-run ranktable check|show|generate|merge`."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys

from platform_plugin.util.folders import check_writable_folder
from platform_plugin.util.numbers import NOT_NEGATIVE, number_argument
from platform_plugin import ranktable
from platform_plugin.ranktable import tools as ranktable_tools
from platform_plugin.errors import ConfigError, Problem, errors_only
from platform_plugin.util.texttable import render_rows


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ranktable", help="check, show, generate or merge HCCL rank tables",
        description="Check, show, generate or merge HCCL rank tables (RANK_TABLE_FILE).")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    check = sub.add_parser("check", help="validate a table (exit 0 valid, 2 invalid)",
                           description="Validate every rule HCCL enforces and list all problems.")
    check.add_argument("file", help="rank table JSON")
    check.add_argument("--env", action="store_true",
                       help="also check RANK_ID/RANK_START/RANK_SIZE/DEVICE_ID of this shell")
    check.add_argument("--wait", default=0, metavar="SECONDS",
                       type=number_argument("RT_WAIT", "--wait", bounds=NOT_NEGATIVE),
                       help="wait up to SECONDS for status \"completed\" first")
    check.add_argument("--json", action="store_true", help="print problems as JSON")
    check.set_defaults(handler=run_check)

    show = sub.add_parser("show", help="print servers, devices and ranks",
                          description="Print servers, devices and ranks; --json prints the "
                                      "table as HCCL 1.0 (older formats converted).")
    show.add_argument("file", help="rank table JSON")
    show.add_argument("--json", action="store_true", help="print HCCL 1.0 JSON")
    show.add_argument("-o", "--output", metavar="FILE", help="write the JSON to FILE")
    show.set_defaults(handler=run_show)

    gen = sub.add_parser("generate", help="make this server's table from hccn.conf (hccl_tools)",
                         description="Make one server's HCCL 1.0 table, like MindSpore's "
                                     "hccl_tools.py.")
    gen.add_argument("--devices", default="0-7", metavar="SPEC",
                     help="cards: 0-7, \"[0,8)\", or 0,1,2,3 (up to 16; default 0-7)")
    gen.add_argument("--hccn-conf", default=ranktable_tools.DEFAULT_HCCN_CONF, metavar="FILE",
                     help="device NIC addresses (default /etc/hccn.conf)")
    gen.add_argument("--server-ip", metavar="IP",
                     help="server_id (default: the address this host's name resolves to)")
    gen.add_argument("--visible-devices", metavar="LIST",
                     help="ASCEND_RT_VISIBLE_DEVICES of the container, e.g. 4,5,6,7; --devices "
                          "then counts visible cards (as hccl_tools does)")
    gen.add_argument("-o", "--output", metavar="FILE",
                     help="write to FILE, or into a folder as hccl_<N>p_<ids>_<ip>.json "
                          "(default stdout)")
    gen.set_defaults(handler=run_generate)

    merge = sub.add_parser("merge", help="join one-server tables into one (merge_hccl)",
                           description="Join tables; servers keep the order given, ranks are "
                                       "renumbered 0..N-1 in that order.")
    merge.add_argument("files", nargs="+", help="tables, in server order")
    merge.add_argument("-o", "--output", metavar="FILE",
                       help="write to FILE, or into a folder as hccl_<S>s_<N>p.json "
                            "(default stdout)")
    merge.set_defaults(handler=run_merge)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return args.handler(args)


def run_check(args: argparse.Namespace) -> int:
    if args.wait:
        ranktable.wait_until_completed(args.file, args.wait)
    table, problems = ranktable.check_file(args.file)
    if table is not None and args.env:
        problems += ranktable.check_environment(table, dict(os.environ))
    errors = errors_only(problems)
    if args.json:
        print(json.dumps({"file": args.file, "valid": not errors and table is not None,
                          "problems": [dataclasses.asdict(p) for p in problems]}, indent=2))
    else:
        print_problems(args.file, table, problems, again="--env " if args.env else "")
    return 2 if errors or table is None else 0


def print_problems(path: str, table, problems: list[Problem], again: str = "") -> None:
    """`again`: the flags of the check that found them, kept in the "run ... again" line."""
    errors = errors_only(problems)
    state = "INVALID" if errors or table is None else "OK"
    summary = f" ({ranktable.rank_summary(table)})" if table is not None else ""
    print(f"{state}: {path}{summary}")
    for problem in problems:
        print(f"  {problem.severity:<7} {problem}")
    if errors:
        print(f"{len(errors)} error(s). Fix them, then run `platform-run ranktable check "
              f"{again}{shlex.quote(path)}` again.")


def run_show(args: argparse.Namespace) -> int:
    table, problems = ranktable.parse_file(args.file)
    if table is None:
        print_problems(args.file, table, problems)
        return 2
    if args.json or args.output:
        _emit(ranktable.to_hccl_dict(table), args.output)
        return 0
    converted = f", converted from {table.converted_from}" if table.converted_from else ""
    print(f"{args.file}: HCCL {table.version}, status {table.status or '-'}{converted}, "
          f"{ranktable.rank_summary(table)}")
    rows = [[s.server_id, s.first_rank if s.devices else None, d.rank_id, d.device_id,
             d.device_ip] for s in table.servers for d in s.devices]
    print(render_rows(["server_id", "RANK_START", "rank_id", "device_id", "device_ip"], rows))
    for problem in problems + ranktable.validate(table):
        print(f"  {problem.severity:<7} {problem}")
    return 0


def run_generate(args: argparse.Namespace) -> int:
    doc, warnings = ranktable_tools.generate(
        devices=args.devices, hccn_conf=args.hccn_conf, server_ip=args.server_ip,
        visible_devices=args.visible_devices)
    for warning in warnings:
        print(f"warning {warning}", file=sys.stderr)
    _emit(doc, args.output, ranktable_tools.default_file_name(doc))
    return 0


def run_merge(args: argparse.Namespace) -> int:
    doc = ranktable_tools.merge(args.files)
    _emit(doc, args.output, ranktable_tools.default_file_name(doc))
    return 0


def _emit(doc: dict, output: str | None, name: str = "hccl.json") -> None:
    """Write to stdout, to FILE, or into a folder under the name hccl_tools would use."""
    text = json.dumps(doc, indent=4) + "\n"  # hccl_tools writes indent=4
    if output and os.path.isdir(output):
        output = os.path.join(output, name)
    if output:
        check_writable_folder(os.path.dirname(os.path.abspath(output)), "output", "RT_OUTPUT",
                              "--output")
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:  # e.g. a folder of that name, or the disk is full
            raise ConfigError([Problem("RT_OUTPUT", f"cannot write {output}: "
                                       f"{exc.strerror or exc}", "--output")]) from None
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
