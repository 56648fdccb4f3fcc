"""`platform-run doctor`: rank table, variables, running ranks, limits, NPUs — OK/WARN/FAIL/SKIP."""
from __future__ import annotations

import argparse
import json

from platform_plugin.cleanup import run as cleanup
from platform_plugin.doctor import checks as doctor
from platform_plugin.cli.env import add_settings_options
from platform_plugin.cli.flags import add_log_dir
from platform_plugin.errors import ConfigError
from platform_plugin.tracking.server.mlflow_features import detect


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor", help="check rank table, variables, running ranks and limits",
        description="Check the rank table, the variables against it, running rank processes "
                    "(duplicates, double launches, ranks missing), the last job, ulimits and "
                    "npu-smi. Prints one row per finding with its fix; exit 1 on any FAIL. "
                    "What cannot be checked on this machine is a SKIP row.")
    add_settings_options(parser)
    add_log_dir(parser)
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ctx = doctor.Context(mode=args.mode, env_file=args.env_file, log_dir=args.log_dir,
                         flags={"RANK_TABLE_FILE": args.rank_table,
                                "RANK_START": args.rank_start, "RANK_ID": args.rank_id})
    ctx.flags = {k: v for k, v in ctx.flags.items() if v is not None}
    rows = doctor.run_checks(ctx) + cleanup_rows(ctx.cwd) + mlflow_rows()
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=2))
    else:
        print(doctor.render(rows))
    return 1 if any(row.status == "FAIL" for row in rows) else 0


def cleanup_rows(cwd: str) -> list:
    """WARN when CODE/ holds what a full run would clean: the platform's full run (全量运行)
    snapshots CODE/ as it is, caches and checkpoints included. (Here, not in doctor/: the
    cleanup workflow sits above the doctor's facts.)"""
    try:
        root = cleanup.find_root(cwd=cwd)
        report = cleanup.clean(root, dry_run=True, progress=False)
    except ConfigError as exc:
        return [doctor.Row(doctor.CheckStatus.SKIP, "CODE/ cleanup", f"no project folder to check: "
                           f"{str(exc).splitlines()[0]}")]
    totals = {k: v for k, v in report.totals().items() if v[0]}
    if not totals:
        return [doctor.Row(doctor.CheckStatus.OK, "CODE/ cleanup", f"{root}: nothing a full run would clean")]
    what = ", ".join(f"{name} {files} files {cleanup.human_bytes(size)}"
                     for name, (files, size) in totals.items())
    return [doctor.Row(doctor.CheckStatus.WARN, "CODE/ cleanup", f"{root} holds what a full run would clean "
                       f"({what}); the platform's full run snapshots CODE/ as it is",
                       "platform-run clean --dry-run (or %platform_clean --dry-run in the "
                       "notebook), then without --dry-run before the full run")]


def mlflow_rows() -> list:
    """What the installed MLflow's UI lacks among what the package uses (MLflow 3.1, the newest
    on Python 3.9, has no experiment kinds): WARN with the workaround, never a failure."""
    features = detect()
    if features is None:
        return [doctor.Row(doctor.CheckStatus.SKIP, "MLflow", "MLflow is not installed in this interpreter: "
                           "ranks still spool their metrics", "deliver them with `platform-run "
                           "sync JOB` where MLflow is installed")]
    missing = features.missing()
    if not missing:
        return [doctor.Row(doctor.CheckStatus.OK, "MLflow", f"MLflow {features.version}: UI with experiment "
                           "kinds, metric page and System metrics tab")]
    return [doctor.Row(doctor.CheckStatus.WARN, "MLflow", f"MLflow {features.version}: {text}") for text in missing]
