"""`platform-run env`: the resolved platform variables, the source of each, and conflicts."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex

from platform_plugin import settings
from platform_plugin.tracking.shared import conventions
from platform_plugin.util.envfile import env_file_paths
from platform_plugin.util.paths import checked_path
from platform_plugin.util.texttable import render_rows


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    """Options that feed `settings.resolve` (shared by commands that resolve settings)."""
    parser.add_argument("--mode", choices=settings.MODES,
                        help="debug or full (default: PLATFORM_RUN_MODE, else the auto rule)")
    parser.add_argument("--env-file", metavar="FILE", type=checked_path("CLI_PATH", "--env-file"), help="user settings (default: the .env files "
                        "from here up to the folder holding CODE/)")
    parser.add_argument("--rank-table", metavar="FILE", type=checked_path("CLI_PATH", "--rank-table"),
                        help="rank table, when the platform set no RANK_TABLE_FILE")
    parser.add_argument("--rank-start", metavar="N", help="first rank of this server")
    parser.add_argument("--rank-id", metavar="N", help="debug: the in-kernel rank")


def resolve_from_args(args: argparse.Namespace) -> settings.Settings:
    flags = {"RANK_TABLE_FILE": args.rank_table, "RANK_START": args.rank_start,
             "RANK_ID": args.rank_id}
    return settings.resolve(args.mode, env_file=args.env_file, flags=flags)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "env", help="show the resolved platform variables and where each came from",
        description="Resolve RANK_TABLE_FILE, RANK_START, RANK_ID, DEVICE_ID and RANK_SIZE for "
                    "the debug or full-run environment and show where each value came from "
                    "(platform / .env / flag / derived / default). Exit 2 on a conflict.")
    add_settings_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--export", action="store_true",
                        help="print `export NAME=value` lines of the variables a child gets")
    parser.set_defaults(func=run)


def tracking_store(resolved) -> dict[str, str]:
    """Where a job started here would track: the store (and why there) and the experiment."""
    env = {**os.environ, **resolved.process_env()}
    uri, source = conventions.default_store(None, env)
    return {"uri": uri, "source": source, "experiment": conventions.experiment_name(env, None)}


def run(args: argparse.Namespace) -> int:
    resolved = resolve_from_args(args)
    store = tracking_store(resolved)
    looked = [args.env_file] if args.env_file else env_file_paths(os.getcwd(), os.environ)
    if args.json:
        print(json.dumps({
            "mode": resolved.mode, "mode_source": resolved.mode_source,
            "env_files": list(resolved.env_files), "env_files_looked_for": looked,
            "variables": [dataclasses.asdict(row) for row in resolved.table],
            "process_env": resolved.process_env(), "tracking": store,
            "problems": [dataclasses.asdict(p) for p in resolved.problems]}, indent=2))
        return 0
    if args.export:
        for name, value in sorted(resolved.process_env().items()):
            print(f"export {name}={shlex.quote(value)}")
        return 0
    print(f"mode: {resolved.mode} ({resolved.mode_source})")
    print(f".env: {', '.join(resolved.env_files) or 'none (looked for ' + ', '.join(looked) + ')'}"
          + (f" ({len(resolved.user_env)} other variable(s) passed to processes)"
             if resolved.user_env else ""))
    print(render_rows(["variable", "value", "source", "note"],
                      [[r.name, r.value, r.source, r.note] for r in resolved.table]))
    print(f"MLflow store: {store['uri']} ({store['source']}); experiment: {store['experiment']}")
    for problem in resolved.problems:
        print(f"{problem.severity}: {problem}")
    return 0
