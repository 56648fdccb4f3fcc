"""`platform-run doctor`: rank table, variables, running ranks, limits, NPUs — OK/WARN/FAIL/SKIP."""
from __future__ import annotations

import argparse
import json

from platform_plugin.doctor import checks as doctor
from platform_plugin.cli.env import add_settings_options


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor", help="check rank table, variables, running ranks and limits",
        description="Check the rank table, the variables against it, running rank processes "
                    "(duplicates, double launches, ranks missing), the last job, ulimits and "
                    "npu-smi. Prints one row per finding with its fix; exit 1 on any FAIL. "
                    "What cannot be checked on this machine is a SKIP row.")
    add_settings_options(parser)
    parser.add_argument("--log-dir", metavar="DIR",
                        help="where jobs are logged (default $PLATFORM_LOG_DIR, else "
                             "./platform_logs)")
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ctx = doctor.Context(mode=args.mode, env_file=args.env_file, log_dir=args.log_dir,
                         flags={"RANK_TABLE_FILE": args.rank_table,
                                "RANK_START": args.rank_start, "RANK_ID": args.rank_id})
    ctx.flags = {k: v for k, v in ctx.flags.items() if v is not None}
    rows = doctor.run_checks(ctx)
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=2))
    else:
        print(doctor.render(rows))
    return 1 if any(row.status == "FAIL" for row in rows) else 0
