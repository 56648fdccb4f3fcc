"""The launch options as argparse arguments, shared by `platform-run launch` and `%dist_run`
so both accept exactly the same flags."""
from __future__ import annotations

import argparse

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.backends import CHOICES

TRACKING_CHOICES = ("auto", "mlflow", "wflogger", "none")


def add_arguments(parser: argparse.ArgumentParser, *, command: bool = True) -> None:
    add = parser.add_argument
    add("--nproc", type=int, help="processes on this server (default: this server's devices in "
        "the rank table; required without a table)")
    add("--backend", choices=CHOICES, default="auto",
        help="how ranks find each other (default auto: printed with its reason)")
    add("--rank-table", metavar="FILE", help="HCCL rank table (else RANK_TABLE_FILE)")
    add("--rank-start", type=int, metavar="N", help="first rank of this server (multi-server table)")
    add("--mode", choices=("debug", "full"), help="platform environment (default: detected)")
    add("--nnodes", type=int, default=1, help="servers in the job (one launcher per server)")
    add("--node-rank", type=int, default=0, help="this server's index, 0..nnodes-1")
    add("--master-addr", default="127.0.0.1", help="address of node 0 (scheduler / MASTER_ADDR)")
    add("--master-port", type=int, help="rendezvous port (default: a free one; required when "
        "--nnodes > 1)")
    add("--log-dir", metavar="DIR", help="job folders go here (else PLATFORM_LOG_DIR, else "
        "./platform_logs)")
    add("--cache-dir", metavar="DIR", help="compile caches/Ascend logs (else PLATFORM_CACHE_DIR, "
        "else ~/.cache/platform_plugin)")
    add("--job-name", metavar="NAME", help="default: the script's name")
    add("--timeout", type=float, metavar="S", help="stop the job after S seconds")
    add("--silence-timeout", type=float, metavar="S",
        help="no output from any rank for S seconds = hung: stop the job")
    add("--grace", type=float, default=3.0, metavar="S",
        help="seconds between SIGTERM and SIGKILL when stopping (default 3)")
    add("--show", default="all", metavar="all|none|0,3", help="ranks whose output is displayed "
        "(logs always hold everything)")
    add("--max-lines-per-sec", type=float, metavar="N",
        help="display at most N lines per second per rank (the rest: logs only)")
    add("--kill-stale", action="store_true",
        help="kill ranks of an earlier job that still hold this job's devices")
    add("--tracking", choices=TRACKING_CHOICES, default="auto", help="metrics sink (default auto)")
    if command:
        add("command", nargs=argparse.REMAINDER, help="-- COMMAND ... (e.g. python train.py)")


def launch_kwargs(args: argparse.Namespace) -> dict:
    """Namespace -> keyword arguments of platform_plugin.launch (without the command)."""
    return dict(nproc=args.nproc, backend=args.backend, rank_table=args.rank_table,
                rank_start=args.rank_start, mode=args.mode, nnodes=args.nnodes,
                node_rank=args.node_rank, master_addr=args.master_addr,
                master_port=args.master_port, log_dir=args.log_dir, cache_dir=args.cache_dir,
                job_name=args.job_name, timeout=args.timeout,
                silence_timeout=args.silence_timeout, grace=args.grace, show=args.show,
                max_lines_per_s=args.max_lines_per_sec, kill_stale=args.kill_stale,
                tracking=args.tracking)


def command_of(args: argparse.Namespace) -> list[str]:
    command = list(getattr(args, "command", None) or [])
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ConfigError([Problem("LAUNCH_NO_COMMAND", "give the command after the options, e.g. "
                                   "`--nproc 2 -- python train.py`", "command")])
    return command
