"""The launch options: ONE record, the only place an option is declared.

Each field of `LaunchOptions` carries its type, default, help text, choices, CLI flag names, its
check and the environment variable it falls back to (`env=`, as torch's `argparse_util.env`:
the help says so). Everything else is generated from it:
- `add_arguments(parser)`: the flags of `platform-run launch` and of `%dist_run`,
- `from_arguments(namespace)`: parsed flags -> a validated record,
- `from_kwargs(kwargs)` (keywords.py: only `launch()` needs it): `launch(cmd, **options)` -> a
  validated record (an unknown name is a ConfigError with a "did you mean" suggestion),
- `with_environment(options, environ)`: the options not given take their variable's value,
- `render_help(prog)`: the option help shown by `platform-run launch --help` and `%dist_run --help`.

Every refusal is a ConfigError with a code, raised before any folder, run or process exists.
What the launcher works out while it runs (the attempt, the agreed job id, the port and the
process count it chose) is in the plan (planning/plan.py), not here.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any, Callable, Dict, Optional, Tuple

from platform_plugin.errors import ConfigError, Problem
from platform_plugin.launcher.peer_streams import (STD_VALUES, local_show, ranks_filter_to_show,
                                                   redirects_to_show, tee_to_show)
from platform_plugin.util.numbers import Bounds, NumberArgument, shown, whole_number
from platform_plugin.util.paths import path_problem
from platform_plugin.variables import (PLATFORM_CACHE_DIR, PLATFORM_CHECKPOINT_DIR,
                                       PLATFORM_CONTROL_PORT,
                                       PLATFORM_HEARTBEAT_TIMEOUT, PLATFORM_JOB_ID,
                                       PLATFORM_JOB_KEY, PLATFORM_LOG_DIR, PLATFORM_RUN_MODE,
                                       PLATFORM_TRACKING, RANK_TABLE_CONTROL_PORT, Variable)

Check = Callable[[Any], Optional[str]]  # value -> what is wrong with it, or None

# Upper bound of --nproc: more processes than any server has cores/devices; a huge value would
# otherwise allocate per-rank state before failing (MemoryError for 10**11).
MAX_NPROC = 4096
MAX_NNODES = 4096
# `auto` and the names of planning/backends.py's registry (tests/launcher/test_options.py keeps
# them equal): declared with the option, `launch --help` loads no backend
BACKEND_CHOICES = ("auto", "rank-table", "ms-cluster", "torch", "plain")
TRACKING_CHOICES = PLATFORM_TRACKING.choices
MODE_CHOICES = PLATFORM_RUN_MODE.choices

def _at_least(low: float, *, above: bool = False) -> Check:
    return Bounds(low, above=above)


def _within(low: int, high: int) -> Check:
    return Bounds(low, high)


def _within_float(low: float, high: float) -> Check:
    return Bounds(low, high, above=True)


def _key(value: str) -> Optional[str]:
    return None if value.strip() not in ("", "@") else "must be a key, or @FILE of one"


def _show(value: str) -> Optional[str]:
    names = [part.strip() for part in value.strip().lower().split(",") if part.strip()]
    if value.strip().lower() in ("all", "none") or local_show(value) is not None:
        return None
    if names and all(whole_number(n) is not None or n == "sched" for n in names):
        return None
    return ("use all, none, sched, comma-separated rank numbers such as 0,3, or local ranks of "
            "every server such as local:0 (local:^0: all but local rank 0)")


def _name(value: str) -> Optional[str]:
    if not value.strip() or "/" in value or value in (".", ".."):
        return "must be a non-empty name without '/'"
    if not value.isprintable():  # a NUL, a newline, a terminal escape: no folder or log line
        return "must be printable text (no control characters)"
    return None


# a job id names folders (the job's, its cache's) and is sent with every message of the job
# link: a generated one is <name of at most 100 bytes>-<date>-<time>-<hex>, at most 121 bytes
MAX_JOB_ID = 128


def _job_id(value: str) -> Optional[str]:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_JOB_ID:
        return f"is {size} bytes: at most {MAX_JOB_ID} (it names the job's folders)"
    return _name(value)


def _folder(value: str) -> Optional[str]:
    return path_problem(value)


def _metric_names(value: str) -> Optional[str]:
    return None if board_metric_names(value) else "give metric names separated by commas, e.g. loss,acc"


RANK_DIR_FIELDS = ("rank_id", "local_rank")


def _rank_dir(value: str) -> Optional[str]:
    """A folder per rank below the working folder, named by the rank: `device_{rank_id}`."""
    try:
        first, second = (value.format(rank_id=n, local_rank=n) for n in (0, 1))
    except (KeyError, IndexError, ValueError, AttributeError):
        return "name only {rank_id} or {local_rank} in braces, e.g. device_{rank_id}"
    if first == second or not any("{" + name in value for name in RANK_DIR_FIELDS):
        return "needs {rank_id} or {local_rank}: one folder per rank, e.g. device_{rank_id}"
    import os
    normal = os.path.normpath(first)
    if os.path.isabs(first) or normal == "." or normal.split(os.sep)[0] == "..":
        return "must be a folder below the working folder (no absolute path, no '..')"
    return None


def _metrics_regex(value: str) -> Optional[str]:
    from platform_plugin.tracking.job.output_metrics import regex_problem  # (when given only)
    return regex_problem(value)


def board_metric_names(value: str | None) -> Tuple[str, ...]:
    """`--board-metrics loss, acc` -> ("loss", "acc")."""
    return tuple(name.strip() for name in (value or "").split(",") if name.strip())


# --nproc-per-node's words (torchrun's): how many processes the devices found here make
DEVICE_WORDS = ("auto", "cpu", "gpu", "npu")


def _nproc(text: str) -> int:
    """`--nproc 4`, or torchrun's `--nproc-per-node auto|cpu|gpu|npu`: the devices found here
    (auto: the visible NPUs, else GPUs, else the usable cores)."""
    word = text.strip().lower()
    if word not in DEVICE_WORDS:
        return _whole(text, "--nproc", "LAUNCH_NPROC")
    from platform_plugin.util import devices  # (only for these words)
    import os
    found = {"npu": len(devices.visible_npus(os.environ)),
             "gpu": len(devices.visible_gpus(os.environ)), "cpu": devices.usable_cores()}
    if word == "auto":
        word = next(kind for kind in ("npu", "gpu", "cpu") if found[kind])
    if not found[word]:
        raise ConfigError([Problem("LAUNCH_NPROC", f"--nproc {text}: no {word.upper()} found on "
                                   "this server; give a number, e.g. --nproc 2", "--nproc")])
    return found[word]


def _nnodes(text: str) -> int:
    """`--nnodes 2`; torchrun's elastic `MIN:MAX` only when both are the same size."""
    low, _, high = text.partition(":")
    if high and low.strip() != high.strip():
        raise ConfigError([Problem("LAUNCH_BAD_VALUE", f"--nnodes {text}: fixed sizes only; "
                                   f"write --nnodes {high.strip()}", "--nnodes")])
    return _whole(low, "--nnodes", "LAUNCH_BAD_VALUE")


def _whole(text: str, where: str, code: str) -> int:
    """A whole number as the docs write it (util/numbers.py), else ConfigError `code`."""
    return int(NumberArgument(code, where, int)(text))


def opt(default: Any, help: str, *, flags: Tuple[str, ...] = (), metavar: str | None = None,
        choices: Tuple[str, ...] | None = None, check: Check | None = None,
        code: str = "LAUNCH_BAD_VALUE", cli: bool = True, aliases: Tuple[str, ...] = (),
        env: Variable | None = None, otherwise: str = "",
        parse: Callable[[str], Any] | None = None) -> Any:
    """Declare one option. `flags`: CLI spellings (default `--field-name`), torchrun's and
    msrun's among them; `aliases`: other keyword names `launch()` accepts (torchrun-style
    spellings); `cli=False`: keyword only; `env`: the variable whose value an option not given
    takes (`otherwise`: what applies when that is unset too, for the help); `parse`: the flag's
    text -> the value, where it is more than a number (a ConfigError for what it refuses)."""
    meta = dict(help=env.fallback_help(help, otherwise) if env is not None else help, flags=flags,
                metavar=metavar, choices=choices, check=check, code=code, cli=cli,
                aliases=aliases, env=env, parse=parse)
    if isinstance(default, dict):  # a fresh one per record
        return dataclasses.field(default_factory=dict, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """What the caller asked for. Defaults here are the only defaults. Immutable:
    `dataclasses.replace()` makes a changed copy, checked again."""

    nproc: Optional[int] = opt(
        None, "processes on this server (default: this server's devices in the rank table, else "
        "the visible NPUs, else 2 on a machine without NPUs)", metavar="N",
        check=_within(1, MAX_NPROC), code="LAUNCH_NPROC", parse=_nproc,
        flags=("--nproc", "--nproc-per-node", "--nproc_per_node", "--local_worker_num",
               "--local-worker-num"), aliases=("nproc_per_node",))
    backend: str = opt("auto", "how ranks find each other (default auto: printed with its reason)",
                       choices=BACKEND_CHOICES, code="LAUNCH_BACKEND")
    rank_table: Optional[str] = opt(None, "HCCL rank table (else RANK_TABLE_FILE)", metavar="FILE",
                                    flags=("--rank-table", "--rank_table_file",
                                           "--rank-table-file"), check=_folder,
                                    code="LAUNCH_PATH")
    rank_start: Optional[int] = opt(None, "first rank of this server (multi-server table)",
                                    metavar="N", check=_at_least(0))
    mode: Optional[str] = opt(None, "platform environment (default: detected)",
                              choices=MODE_CHOICES)
    nnodes: int = opt(1, "servers in the job (one launcher per server)", metavar="N",
                      check=_within(1, MAX_NNODES), parse=_nnodes)
    node_rank: int = opt(0, "this server's index, 0..nnodes-1", metavar="I", check=_at_least(0),
                         code="LAUNCH_NODE_RANK", flags=("--node-rank", "--node_rank"))
    master_addr: str = opt("127.0.0.1", "address of node 0 (scheduler / MASTER_ADDR)",
                           metavar="ADDR", flags=("--master-addr", "--master_addr"))
    master_port: Optional[int] = opt(
        None, "rendezvous port (default: a free one; required when --nnodes > 1)", metavar="PORT",
        check=_within(1, 65535), code="LAUNCH_MASTER_PORT",
        flags=("--master-port", "--master_port"))
    control_port: Optional[int] = opt(
        None, "rank-table route, several servers: the port the table's first server's launcher "
        "listens on for the others'", metavar="PORT", check=_within(1, 65535),
        code="LAUNCH_MASTER_PORT", env=PLATFORM_CONTROL_PORT,
        otherwise=str(RANK_TABLE_CONTROL_PORT))
    log_dir: Optional[str] = opt(None, "job folders go here", metavar="DIR", env=PLATFORM_LOG_DIR,
                                 otherwise="./platform_logs", flags=("--log-dir", "--log_dir"),
                                 check=_folder, code="LAUNCH_PATH")
    cache_dir: Optional[str] = opt(None, "compile caches/Ascend logs", metavar="DIR",
                                   env=PLATFORM_CACHE_DIR, otherwise="~/.cache/platform_plugin",
                                   check=_folder, code="LAUNCH_PATH")
    checkpoint_dir: Optional[str] = opt(
        None, "the job's checkpoints, kept across its restarts (PLATFORM_CHECKPOINT_DIR in every "
        "rank); with several servers, a folder they all see", metavar="DIR",
        env=PLATFORM_CHECKPOINT_DIR, otherwise="<job folder>/checkpoints", check=_folder,
        code="LAUNCH_PATH")
    job_name: Optional[str] = opt(None, "default: the script's name", metavar="NAME", check=_name,
                                  code="LAUNCH_JOB_NAME")
    timeout: Optional[float] = opt(None, "stop the job after S seconds", metavar="S",
                                   check=_at_least(0, above=True), code="LAUNCH_TIMEOUT")
    silence_timeout: Optional[float] = opt(
        None, "no output from any rank for S seconds = hung: stop the job", metavar="S",
        check=_at_least(0, above=True), code="LAUNCH_TIMEOUT")
    grace: float = opt(3.0, "seconds between SIGTERM and SIGKILL when stopping (default 3)",
                       metavar="S", check=_at_least(0), code="LAUNCH_TIMEOUT",
                       flags=("--grace", "--shutdown-timeout", "--shutdown_timeout"))
    show: Optional[str] = opt(
        None, "ranks whose output is streamed as prefixed lines (default: the live rank board in "
        "a notebook, all elsewhere; the logs hold everything)", metavar="all|none|0,3",
        check=_show, code="LAUNCH_BAD_SHOW")
    board_metrics: Optional[str] = opt(
        None, "metrics of the notebook board's metrics column, in this order (default: up to 4 "
        "the ranks log most often, a throughput such as samples_per_s last)", metavar="A,B,C",
        check=_metric_names)
    metrics_from_output: Optional[str] = opt(
        None, "read metrics from the ranks' lines with this regex, each named group a metric "
        "(`step`, `epoch` give the step), e.g. 'loss[: ]+(?P<loss>[0-9.eE+-]+)'; into each rank's "
        "run unless the rank logs that name itself; `none`: no parsing at all (default: "
        "[launch] metrics_from_output of platform.toml, else MindSpore's LossMonitor and "
        "TimeMonitor lines only)", metavar="REGEX", check=_metrics_regex,
        code="LAUNCH_METRICS_REGEX")
    max_lines_per_s: Optional[float] = opt(
        None, "display at most N lines per second per rank (the rest: logs only)",
        flags=("--max-lines-per-sec",), metavar="N", check=_at_least(0, above=True))
    buffered: bool = opt(
        False, "keep the ranks' own output buffering (no PYTHONUNBUFFERED=1): several times "
        "faster for chatty ranks, but output arrives in blocks - for runs nobody watches live")
    kill_stale: bool = opt(False, "kill ranks of an earlier job that still hold this job's devices")
    tracking: str = opt("auto", "metrics sink (default auto)", choices=TRACKING_CHOICES)
    system_metrics_interval: float = opt(
        5.0, "sample each rank's CPU, memory, threads and its NPU/GPU every S seconds into its "
        "run's System metrics (default 5)", metavar="S", check=_at_least(0, above=True),
        code="LAUNCH_BAD_VALUE")
    no_system_metrics: bool = opt(False, "do not sample system metrics")
    verbose: bool = opt(False, "also show library chatter (MindSpore networking, MLflow INFO, "
                        "warnings) that otherwise goes to the logs only")
    job_id: Optional[str] = opt(
        None, "the job's id on every server", metavar="ID", check=_job_id, code="LAUNCH_JOB_ID",
        env=PLATFORM_JOB_ID, flags=("--job-id", "--rdzv-id", "--rdzv_id"),
        otherwise="agreed by the servers of the job, else generated from the job name")
    job_key: Optional[str] = opt(
        None, "the key that signs the launchers' messages, the same on every server: a string "
        "or @FILE (a file only its owner may read)", metavar="KEY|@FILE", check=_key,
        code="LAUNCH_JOB_KEY", env=PLATFORM_JOB_KEY,
        otherwise="derived from the job id when one is given, else unsigned")
    heartbeat_timeout: Optional[float] = opt(
        None, "a server whose launcher says nothing for S seconds failed (frozen or cut off): "
        "the others stop", metavar="S", check=_within_float(0, 60), code="LAUNCH_TIMEOUT",
        env=PLATFORM_HEARTBEAT_TIMEOUT, otherwise="60")
    rank_dir: Optional[str] = opt(
        None, "run each rank in its own folder below the working folder, removed and made anew "
        "before every attempt, as the shell loops' `rm -rf device_$i; mkdir`: a pattern with "
        "{rank_id} or {local_rank}, e.g. device_{rank_id}; the command's arguments that name "
        "an existing file or folder are made absolute", metavar="PATTERN", check=_rank_dir,
        code="LAUNCH_RANK_DIR")
    cluster_timeout: Optional[int] = opt(
        None, "MindSpore's dynamic cluster: seconds the ranks wait for each other to start "
        "(MS_TOPO_TIMEOUT; default: yours if set, else 120)", metavar="S",
        check=_within(1, 86400), code="LAUNCH_TIMEOUT",
        flags=("--cluster-timeout", "--cluster_time_out", "--cluster-time-out"))
    max_restarts: int = opt(0, "after a failure stop all, then start the whole job again, up to "
                            "N times (same job id, new attempt)", metavar="N",
                            check=_within(0, 1000), code="LAUNCH_MAX_RESTARTS",
                            flags=("--max-restarts", "--max_restarts"))
    background: bool = opt(
        False, "return at once with the job id and a live board; the job runs in a launcher "
        "process of its own, survives a page reload and other cells, and stops with the kernel "
        "(the attach, jobs, wait and stop magics manage it; a notebook run by platform-run "
        "debug|full runs it in the foreground)")
    detach: bool = opt(
        False, "as --background, in a session of its own: the job survives the kernel or the "
        "terminal that started it (platform-run attach|jobs|stop manage it)")
    # keyword-only (not flags): what an embedding program passes
    env: Dict[str, str] = opt({}, "extra variables for every rank (win over all else)", cli=False)
    cwd: Optional[str] = opt(None, "working directory of the ranks (default: the current one)",
                             cli=False, check=_folder, code="LAUNCH_PATH")
    check: bool = opt(True, "raise JobFailed when the job failed (False: return the result)",
                      cli=False)
    write: Optional[Callable[[str], Any]] = opt(
        None, "a function that replaces sys.stdout for the display", cli=False)

    def __post_init__(self) -> None:
        problems = [p for f in FIELDS.values() if (p := _problem(f, getattr(self, f.name)))]
        if problems:
            raise ConfigError(problems)

    __hash__ = None  # type: ignore[assignment]  # unhashable: holds a dict (env)


FIELDS: Dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(LaunchOptions)}
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def _base_type(f: dataclasses.Field) -> type | None:
    """`Optional[int]` -> int (annotations are strings under `from __future__ import annotations`)."""
    text = str(f.type).replace("Optional[", "").rstrip("]")
    return _TYPES.get(text)


def flags_of(name: str) -> Tuple[str, ...]:
    f = FIELDS[name]
    return f.metadata["flags"] or ("--" + name.replace("_", "-"),)


def _problem(f: dataclasses.Field, value: Any) -> Problem | None:
    meta = f.metadata
    where = flags_of(f.name)[0] if meta["cli"] else f.name
    if value is None and f.default is None:
        return None
    kind = _base_type(f)
    if f.name == "env" and not (isinstance(value, dict)
                                and all(isinstance(k, str) and isinstance(v, str)
                                        for k, v in value.items())):
        return Problem(meta["code"], f"{where} must be a dict of str -> str", where)
    if kind is not None and (not isinstance(value, (int, float) if kind is float else kind)
                             or (kind in (int, float) and isinstance(value, bool))):
        return Problem(meta["code"], f"{where} is {_quoted(value)} ({_noun(type(value))}): give "
                       f"{_noun(kind)} instead", where)
    if kind is float and not math.isfinite(value):
        return Problem(meta["code"], f"{where} {value!r}: must be a finite number", where)
    if meta["choices"] and value not in meta["choices"]:
        return Problem(meta["code"], f"{where} {_quoted(value)}: choose one of "
                       f"{', '.join(meta['choices'])}", where)
    complaint = meta["check"](value) if meta["check"] else None
    if complaint:
        return Problem(meta["code"], f"{where} {_quoted(value)}: {complaint}", where)
    return None


def _quoted(value: Any) -> str:
    """A value as a refusal shows it: one line, at most 40 characters of it (a 120 KB job id
    or a 5,000-character folder is named, not printed)."""
    return shown(value) if isinstance(value, str) else shown(repr(value))[1:-1]


# ---- torchrun's and msrun's flags that are no option of the record --------------------------------
# Their spellings of an option of ours are the option's own `flags` (--nproc-per-node,
# --local_worker_num, --rdzv-id, --log_dir, --cluster_time_out, ...). These are the rest: each
# says what it becomes (`to`: its value and the options given -> options), or that it changes
# nothing here (`to` None), or why it is refused and what to write instead (`refused`).
# docs/launch.md's table lists every flag of both launchers; tests/launcher/test_peer_flags.py
# checks the table against these declarations.

@dataclasses.dataclass(frozen=True)
class PeerFlag:
    flags: Tuple[str, ...]
    peer: str  # "torchrun" | "msrun"
    does: str  # the help line: what platform-run does with it
    to: Optional[Callable[[Any, Dict[str, Any]], Dict[str, Any]]] = None
    metavar: Optional[str] = None  # None: a switch without a value
    choices: Optional[Tuple[str, ...]] = None
    refused: str = ""  # what to write instead: the flag is refused with this line

    @property
    def dest(self) -> str:
        return "peer_" + self.flags[0].lstrip("-").replace("-", "_")


def _endpoint(value: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """torchrun's `--rdzv-endpoint HOST[:PORT]` = --master-addr HOST --master-port PORT (its
    default port, 29400, when none is written)."""
    host, colon, port = value.strip().rpartition(":")
    if not colon or whole_number(port) is None:  # no port, or an IPv6 address without one
        host, port = value.strip(), "29400"
    host = host.strip("[]")
    if not host:
        raise ConfigError([Problem("LAUNCH_BAD_VALUE", f"--rdzv-endpoint {value!r}: write "
                                   "HOST:PORT, e.g. --rdzv-endpoint 10.0.0.1:29400",
                                   "--rdzv-endpoint")])
    return {"master_addr": host, "master_port": int(port)}


def _standalone(value: Any, given: Dict[str, Any]) -> Dict[str, Any]:
    if given.get("nnodes", 1) != 1:
        raise ConfigError([Problem("LAUNCH_BAD_VALUE", "--standalone is one server: leave out "
                                   f"--nnodes {given['nnodes']}, or --standalone", "--standalone")])
    return {"nnodes": 1}


def _worker_num(value: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """msrun's `--worker_num W` (every server's ranks together) with `--local_worker_num N`
    (this server's): W / N servers. Without N: W ranks on this one server."""
    total = _whole(value, "--worker_num", "LAUNCH_NPROC")
    local = given.get("nproc")
    if local is None:
        return {"nproc": total}
    if total < 1 or total % local:
        raise ConfigError([Problem("LAUNCH_NPROC", f"--worker_num {total} is not a multiple of "
                                   f"--local_worker_num {local}: every server runs as many ranks",
                                   "--worker_num")])
    return {"nnodes": total // local}


def _tail_worker_log(value: str, given: Dict[str, Any]) -> Dict[str, Any]:
    return {"show": "all" if value.strip() in ("-1", "") else value.strip()}


NOTHING = None  # accepted: changes nothing here
PEER_FLAGS: Tuple[PeerFlag, ...] = (
    PeerFlag(("--standalone",), "torchrun", "one server, rendezvous on 127.0.0.1 and a free port "
             "(the default)", _standalone),
    PeerFlag(("--rdzv-endpoint", "--rdzv_endpoint"), "torchrun",
             "HOST:PORT = --master-addr HOST --master-port PORT", _endpoint, "HOST:PORT"),
    PeerFlag(("--rdzv-backend", "--rdzv_backend"), "torchrun", "accepted: the rendezvous is "
             "node 0's store on --master-addr:--master-port either way", NOTHING, "c10d|static",
             ("c10d", "static")),
    PeerFlag(("--rdzv-conf", "--rdzv_conf"), "torchrun", "accepted, unused: no elastic "
             "rendezvous to tune", NOTHING, "K=V,..."),
    PeerFlag(("--monitor-interval", "--monitor_interval"), "torchrun", "accepted, unused: the "
             "launcher sees a rank's end at once", NOTHING, "S"),
    PeerFlag(("--start-method", "--start_method"), "torchrun", "accepted: every rank is a new "
             "process (spawn)", NOTHING, "spawn|fork|forkserver", ("spawn", "fork", "forkserver")),
    PeerFlag(("--redirects", "-r"), "torchrun", "local ranks redirected = logs only (= --show "
             "local:^0,3: the others stay shown, on every server)", redirects_to_show, STD_VALUES),
    PeerFlag(("--tee", "-t"), "torchrun", "local ranks teed = shown, even when redirected "
             "(= --show local:...)", tee_to_show, STD_VALUES),
    PeerFlag(("--local-ranks-filter", "--local_ranks_filter"), "torchrun", "= --show local:0,3 "
             "(local ranks, on every server)", ranks_filter_to_show, "0,3"),
    PeerFlag(("--module", "-m"), "torchrun", "the command is a module: python -m MODULE",
             lambda value, given: {}, None),
    PeerFlag(("--no-python", "--no_python"), "torchrun", "accepted: a command that is not a .py "
             "file runs as written", NOTHING),
    PeerFlag(("--run-path", "--run_path"), "torchrun", "accepted: the script runs with the "
             "ranks' python either way", NOTHING),
    PeerFlag(("--role",), "torchrun", "", metavar="NAME",
             refused="one role per job here (ROLE_NAME=default): leave --role out"),
    PeerFlag(("--event-log-handler", "--event_log_handler"), "torchrun", "", metavar="H",
             refused="torchelastic's event handlers do not exist here: leave it out (job.json "
             "records the job)"),
    PeerFlag(("--local-addr", "--local_addr"), "torchrun", "", metavar="ADDR",
             refused="the ranks reach node 0 at --master-addr: leave --local-addr out"),
    PeerFlag(("--logs-specs", "--logs_specs"), "torchrun", "", metavar="NAME",
             refused="logs are <log dir>/<job>/rank_N.log: give --log-dir DIR"),
    PeerFlag(("--numa-binding", "--numa_binding"), "torchrun", "", metavar="MODE",
             refused="no binding here: put numactl in the command"),
    PeerFlag(("--signals-to-handle", "--signals_to_handle"), "torchrun", "", metavar="SIGNALS",
             refused="SIGINT, SIGTERM and SIGHUP always stop every rank: leave it out"),
    PeerFlag(("--duplicate-stdout-filters", "--duplicate_stdout_filters",
              "--duplicate-stderr-filters", "--duplicate_stderr_filters"), "torchrun", "",
             metavar="TEXT", refused="every line is in the rank's log: grep it"),
    PeerFlag(("--virtual-local-rank", "--virtual_local_rank"), "torchrun", "",
             refused="LOCAL_RANK is the rank's index on its server: leave it out"),
    PeerFlag(("--worker_num", "--worker-num"), "msrun", "every server's ranks together: "
             "--nnodes = W / --local_worker_num", _worker_num, "W"),
    PeerFlag(("--join",), "msrun", "accepted: the launcher always waits for the ranks and "
             "reports the job", NOTHING, "True|False", ("True", "False")),
    PeerFlag(("--tail_worker_log", "--tail-worker-log"), "msrun", "= --show (-1: all)",
             _tail_worker_log, "-1|0,3"),
    PeerFlag(("--worker_log_name", "--worker-log-name"), "msrun", "", metavar="NAME",
             refused="logs are <log dir>/<job>/rank_N.log: give --log-dir DIR"),
    PeerFlag(("--bind_core", "--bind-core"), "msrun", "", metavar="True|DICT",
             refused="no core binding here: put taskset or numactl in the command"),
    PeerFlag(("--bind_numa", "--bind-numa"), "msrun", "", metavar="True|DICT",
             refused="no NUMA binding here: put numactl in the command"),
    PeerFlag(("--sim_level", "--sim-level", "--sim_rank_id", "--sim-rank-id"), "msrun", "",
             metavar="N", refused="a dry run is MindSpore's: set MS_SIMULATION_LEVEL in .env "
             "and launch one rank"),
)


# ---- argparse, generated from the record -------------------------------------------------------

def _converter(f: dataclasses.Field) -> Callable[[str], Any]:
    """The flag's text as the record's type: a number read as the docs write it
    (util/numbers.py: ASCII digits, no `1_000`, `+1`, ` 2`, nan or inf), its range checked by
    the record (a keyword of `launch()` is checked the same way)."""
    kind = _base_type(f)
    parse = f.metadata["parse"]
    if parse is not None:  # an option with words of its own (--nproc auto), numbers read alike
        return parse
    if kind in (int, float):
        return NumberArgument(f.metadata["code"], flags_of(f.name)[0], kind)
    return str


NOUNS = {int: "a whole number", float: "a number", str: "text", bool: "True or False",
         dict: "a dict", list: "a list", tuple: "a tuple"}


def _noun(kind: Any) -> str:
    """What a type means to someone writing an option: "a whole number", not "int"."""
    return NOUNS.get(kind, f"a {getattr(kind, '__name__', 'value')}")


# NO_ABBREVIATIONS: every parser of the package (the CLI's and its sub-commands', the magics')
# is made with allow_abbrev=False. argparse's default takes `--time 5` for `--timeout 5`, so a
# new option starting the same way would change what an old command line or notebook cell
# means, or make it ambiguous (in msrun 2.10 `--worker` matches both `--worker_num` and
# `--worker_log_name`). torchrun and msrun keep argparse's default; a flag here is spelled out.
def add_arguments(parser: argparse.ArgumentParser, *, command: bool = True) -> None:
    """Every CLI option as a flag (defaults None: the record's defaults apply in from_arguments,
    so the parser never declares a default of its own)."""
    for f in FIELDS.values():
        meta = f.metadata
        if not meta["cli"]:
            continue
        default = f.default
        shown = f" (default {default})" if default not in (None, False) and "default" not in \
            meta["help"] else ""
        if _base_type(f) is bool:
            parser.add_argument(*flags_of(f.name), dest=f.name, action="store_const", const=True,
                                default=None, help=meta["help"])
            continue
        parser.add_argument(*flags_of(f.name), dest=f.name, type=_converter(f), default=None,
                            choices=meta["choices"], metavar=meta["metavar"],
                            help=meta["help"] + shown)
    peers = parser.add_argument_group("torchrun's and msrun's flags")
    for peer in PEER_FLAGS:
        words = f"{peer.peer}'s: " + (peer.does or f"refused: {peer.refused}")
        if peer.metavar is None:
            peers.add_argument(*peer.flags, dest=peer.dest, action="store_const", const=True,
                               default=None, help=words)
        else:
            peers.add_argument(*peer.flags, dest=peer.dest, default=None, metavar=peer.metavar,
                               choices=peer.choices, help=words)
    if command:
        parser.add_argument("command", nargs=argparse.REMAINDER,
                            help="-- COMMAND ... (e.g. python train.py)")


def from_arguments(args: argparse.Namespace, **overrides: Any) -> LaunchOptions:
    """Parsed flags (+ keyword-only options) -> the validated record."""
    values = {name: getattr(args, name) for name, f in FIELDS.items()
              if f.metadata["cli"] and getattr(args, name, None) is not None}
    given = dict(values)
    for peer in PEER_FLAGS:
        value = getattr(args, peer.dest, None)
        if value is None:
            continue
        if peer.refused:
            raise ConfigError([Problem("LAUNCH_PEER_FLAG", f"{peer.flags[0]}: {peer.refused}",
                                       peer.flags[0])])
        if peer.to is not None:  # the options written out win over what a peer flag implies
            values.update({k: v for k, v in peer.to(value, values).items() if k not in given})
    if values.get("node_rank") == AUTO_NODE_RANK and "node_rank" not in overrides:
        values["node_rank"] = _auto_node_rank(values.get("nnodes", 1))
    values.update(overrides)
    return LaunchOptions(**values)


AUTO_NODE_RANK = -1  # msrun's default --node_rank: MindSpore's scheduler numbers the servers


def _auto_node_rank(nnodes: int) -> int:
    """msrun's `--node_rank -1`: with one server it is ignored (every rank is here: node 0); with
    several, MindSpore's scheduler would number the servers in the order they join, after the
    cluster is built. Here the plan numbers every server's ranks before anything starts (rank =
    node rank x ranks per server + local rank: its logs, devices, checkpoints and restarts are
    planned per server), so each server must say which it is."""
    if nnodes == 1:
        return 0
    raise ConfigError([Problem(
        "LAUNCH_NODE_RANK", f"--node_rank -1 with {nnodes} servers: msrun lets MindSpore's "
        "scheduler number the servers as they join; here each server's ranks are planned "
        "before the start (rank = node rank x ranks per server + local rank), so give each "
        f"server its own --node_rank 0..{nnodes - 1} (0 on the --master_addr server)",
        "--node_rank")])


def with_environment(options: LaunchOptions, environ: Dict[str, str]) -> LaunchOptions:
    """The options not given that declare a variable (`env=`) take its value from `environ`: the
    ranks' environment (the launcher's own, the .env file, the platform's files)."""
    found, problems = {}, []
    for f in FIELDS.values():
        variable = f.metadata["env"]
        if variable is None or getattr(options, f.name) is not None or not variable.is_set(environ):
            continue
        found[f.name] = variable.get(environ)
        wrong = _problem(f, found[f.name])
        if wrong is not None:  # named as it was set: the variable, for the option it stands in
            flag = flags_of(f.name)[0]
            problems.append(Problem(wrong.code, variable.name + wrong.message.removeprefix(flag)
                                    + f" (it stands in for {flag})", variable.name))
    if problems:
        raise ConfigError(problems)
    return dataclasses.replace(options, **found) if found else options


# the options the `[launch]` table of a project's platform.toml may set (util/project.py)
PROJECT_SETTINGS = ("metrics_from_output",)


def with_project_settings(options: LaunchOptions, table: Dict[str, Any],
                          path: str | None) -> LaunchOptions:
    """The options not given take the value of the project's platform.toml `[launch]` table
    (`table`, read from `path`); a key it may not set, or a bad value, is refused naming it."""
    problems = []
    for key in sorted(set(table) - set(PROJECT_SETTINGS)):
        problems.append(Problem("LAUNCH_PROJECT_FILE", f"{path}: [launch] {key} is no setting "
                                f"of it (it may set: {', '.join(PROJECT_SETTINGS)})", str(path)))
    found = {}
    for key in PROJECT_SETTINGS:
        if key not in table or getattr(options, key) is not None:
            continue
        f, value = FIELDS[key], table[key]
        where = f"{path} [launch] {key}"
        complaint = (f"is {value!r}: give text" if not isinstance(value, str) else
                     f.metadata["check"](value) if f.metadata["check"] else None)
        if complaint:
            problems.append(Problem(f.metadata["code"], f"{where} {complaint}", where))
        found[key] = value
    if problems:
        raise ConfigError(problems)
    return dataclasses.replace(options, **found) if found else options


def command_of(args: argparse.Namespace) -> list[str]:
    command = list(getattr(args, "command", None) or [])
    if command and command[0] == "--":
        command = command[1:]
    if command and getattr(args, PEER_MODULE.dest, None):  # torchrun -m MODULE ARGS
        command = ["python", "-m", *command]
    if not command:
        raise ConfigError([Problem("LAUNCH_NO_COMMAND", "give the command after the options, e.g. "
                                   "`--nproc 2 -- python train.py`", "command")])
    return command


PEER_MODULE = next(p for p in PEER_FLAGS if p.flags[0] == "--module")


def render_help(prog: str = "platform-run launch", *, extra: Callable[[argparse.ArgumentParser],
                                                                    None] | None = None) -> str:
    """The full option help (flags, defaults, choices), as `--help` prints it."""
    parser = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False,
                                     usage="%(prog)s [options] [--] COMMAND ...")
    add_arguments(parser)
    if extra is not None:
        extra(parser)
    return parser.format_help()
