"""The launcher's single handle on tracking (contract in docs/architecture.md).

    job_tracking = JobTracking.create(choice, plan)
    env = job_tracking.prepare()      # before spawning: the spool folder and sink.json; no MLflow
    ...Supervisor(plan, output, [job_tracking]).run()   # started(): the forwarding helper starts
    report = job_tracking.finish(result)   # end.json, then wait for delivery up to the deadline

Nothing of the sink runs in the launcher's process: the forwarding helper process
(`tracking/delivery/helper.py`) imports MLflow, opens the store under its lock, creates the
experiment and the runs, forwards while the ranks run, and ends the runs after `finish()`
returned. A tracking failure never stops or delays the job: the points wait in the spool and the
report says why. (One exception, stdlib only: `check_store` asks an http store at the start, in
a thread, whether it takes this user's points - store_check.py - so a refusal is said at once.) `JobTracking.check` refuses a bad choice or store before anything of the job
exists.

`create("none", ...)` returns `Untracked` (report.py): no tracking, said as such; its steps do
nothing except tell the ranks that tracking is off (so a rank's `get_tracker()` doesn't forward
on its own).
"""
from __future__ import annotations

import _thread
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Sequence

from platform_plugin.errors import ConfigError
from platform_plugin.ranktable import load as load_rank_table
from platform_plugin.tracking.delivery import offsets
from platform_plugin.tracking.shared.job_folders import spool_folder_name
from platform_plugin.tracking.shared.state import HelperStatus, JobEnd, SinkConfig
from platform_plugin.tracking.shared import conventions
from platform_plugin.tracking.job.views import PlanView, RankView, ResultView
from platform_plugin.tracking.job.report import DeliveryReport, Untracked, compare_hint
from platform_plugin.tracking.shared.sink_choice import choose, choose_layout, wflogger_importable
from platform_plugin.tracking.shared.uri_check import check_tracking_uri
from platform_plugin.util.envfile import env_file_paths
from platform_plugin.variables import (PLATFORM_RUN_MODE, PLATFORM_SERVER_ID, PLATFORM_TRACKING,
                                       PLATFORM_TRACKING_HELPER, PLATFORM_TRACKING_LAYOUT,
                                       PLATFORM_TRACKING_SPOOL_DIR, PLATFORM_WFLOGGER_CALL_TIMEOUT)

__all__ = ["DeliveryReport", "JobTracking"]

PLATFORM_VARIABLES = ("RANK_TABLE_FILE", "RANK_START", "RANK_SIZE", PLATFORM_SERVER_ID.name,
                      PLATFORM_RUN_MODE.name)
FIRST_POLL_S, MAX_POLL_S = 0.01, 0.25  # the launcher's checks for "everything delivered"
# The forwarding helper starts as soon as a rank spooled something, else once the ranks ran
# HELPER_DELAY_S or at their end: a short job with nothing to deliver (a no-op, a cell that fails
# at once) does not share its cores with the helper's interpreter start, and a job with points
# does not wait out the delay for them. The spool folder is looked at every SPOOL_CHECK_S
# meanwhile (a scandir of a few files).
HELPER_DELAY_S = 0.5
SPOOL_CHECK_S = 0.02
# While the ranks run, the helper's status (helper.json: the last pass's error, "" once a pass
# delivered) is read this often; a delivery that failed on two reads in a row is said (one
# failed pass is often a request cut by a server's restart, and the next pass delivers it).
WATCH_S = 2.0


class JobTracking(Untracked):
    """A tracked job: its spool folder and sink.json, the forwarding helper, the report."""

    @classmethod
    def create(cls, choice: str, plan: PlanView, *, layout: str | None = None) -> Untracked:
        """The job's tracking: this class, spooling for a sink, or `Untracked` (none)."""
        if choice == "none":
            return Untracked()
        env = job_environment(plan)
        sink_name = choose(choice, env)
        if sink_name is None:
            return Untracked()
        return cls(sink_name, plan, choose_layout(layout, env))

    @classmethod
    def check(cls, choice: str, plan: PlanView) -> None:
        """Refuse what `create` would refuse, and an MLFLOW_TRACKING_URI no MLflow client can
        use (tracking/shared/uri_check.py), before anything of the job exists: `create` runs once the
        job's folder is made (a bad PLATFORM_TRACKING left it behind)."""
        if choice == "none":
            return
        env = job_environment(plan)
        choose_layout(None, env)
        sink = choose(choice, env)
        if sink == "wflogger":  # asked for by name (auto picks it only when it is there)
            if not wflogger_importable():  # the helper runs this interpreter and PYTHONPATH
                raise ConfigError("--tracking / PLATFORM_TRACKING is wflogger, but the platform's "
                                  "wflogger SDK (wf_analyse) is not importable here: every point "
                                  "would wait in the spool. Use --tracking mlflow or none off the "
                                  "platform", code="TRACKING_SINK")
            if PLATFORM_WFLOGGER_CALL_TIMEOUT.get(env) <= 0:  # a bad number: ENV_BAD_VALUE
                raise ConfigError(f"{PLATFORM_WFLOGGER_CALL_TIMEOUT.name} must be more than 0 "
                                  "seconds", code="ENV_BAD_VALUE")
        if sink == "mlflow" and env.get("MLFLOW_TRACKING_URI"):
            check_tracking_uri(env["MLFLOW_TRACKING_URI"], environ=env)

    def __init__(self, sink_name: str, plan: PlanView, layout: str) -> None:
        self.sink = sink_name
        self.plan = plan
        attempt = int(getattr(plan, "attempt", 1) or 1)  # --max-restarts: a spool per attempt
        self.spool_dir = os.path.join(plan.job_dir, spool_folder_name(attempt))
        self.config = job_sink_config(sink_name, plan, layout)
        self.notes = local_store_notes(self.config, plan) if attempt == 1 else []
        self.helper: subprocess.Popen | None = None
        self.setup_error = ""
        self._starting = threading.Lock()
        self._spawn_done: threading.Event | None = None  # set once the helper's spawn is over
        self._ranks_ended = threading.Event()

    def prepare(self) -> dict[str, str]:
        """Cheap and sink-free: the ranks only need to know where to spool."""
        os.makedirs(self.spool_dir, exist_ok=True)
        self.config.save(self.spool_dir)
        return {PLATFORM_TRACKING.name: self.sink,
                PLATFORM_TRACKING_SPOOL_DIR.name: str(self.spool_dir),
                PLATFORM_TRACKING_LAYOUT.name: self.config.layout}

    def started(self, supervisor: Any = None) -> None:
        """Supervisor observer: the ranks run; the helper starts when a rank spooled a record,
        HELPER_DELAY_S later, or at their end, whichever comes first."""
        _thread.start_new_thread(self._start_after, (HELPER_DELAY_S,))

    def check_store(self, say: Callable[[str], None]) -> None:
        """An MLflow server (http, https) is asked at once whether it takes this user's points
        into the experiment (store_check.py), in a thread: the ranks never wait for it. Then,
        for every store, the delivery is watched while the ranks run (`_watch_delivery`)."""
        said: list[str] = []  # what the start's check said: the watch does not say it again

        def say_once(text: str) -> None:
            said.append(text)
            say(text)

        _thread.start_new_thread(self._watch_delivery, (say, said))
        uri = self.config.tracking_uri or ""
        if self.sink != "mlflow" or not uri.startswith(("http://", "https://")):
            return
        from platform_plugin.tracking.job.store_check import check_in_background
        check_in_background(uri, self.config.experiment_name or "", helper_environment(self.plan),
                            say_once, self._waiting_hint())

    def _waiting_hint(self) -> str:
        return (f"its points wait in {self.spool_dir}; `platform-run sync {self.plan.job_id}` "
                "delivers them once that is fixed")

    def _watch_delivery(self, say: Callable[[str], None], said: list[str]) -> None:
        """Until the ranks end: the helper's delivery failing on two reads of helper.json in a
        row is said once (a store that went away or refused the points mid-job: the user hears
        of it then, not hours later at the end), and its recovery once after that."""
        failing, stopped = 0, False
        while not self._ranks_ended.wait(WATCH_S):
            status = HelperStatus.load(self.spool_dir)
            error = status.error if status is not None else ""
            failing = failing + 1 if error else 0
            if failing == 2 and not stopped and not said:
                stopped = True
                say(f"tracking: the store stopped taking the job's points ({error}). The job "
                    f"goes on; the helper keeps trying, and {self._waiting_hint()}")
            elif stopped and not error:
                stopped = False
                say("tracking: the store takes the job's points again: delivery goes on")

    def _start_after(self, delay: float) -> None:
        deadline = time.monotonic() + delay
        while not self._ranks_ended.wait(SPOOL_CHECK_S):
            if time.monotonic() >= deadline or offsets.any_spooled(self.spool_dir, on_error=False):
                break
        done = self._claim_start()
        if done is not None:
            self._spawn(done)

    def start(self) -> None:
        """Start the forwarding helper (once), from a thread of its own: the spawn waits until
        the new process has exec'd, which takes a free core, and the launcher's loop need not
        wait for that while the ranks start. A failure to start it is reported by `finish`, not
        raised."""
        done = self._claim_start()
        if done is not None:
            _thread.start_new_thread(self._spawn, (done,))  # threading's start would wait

    def _claim_start(self) -> threading.Event | None:
        """The event to set once the helper's spawn is over, for the one caller that spawns it."""
        with self._starting:
            if self._spawn_done is not None:
                return None
            self._spawn_done = threading.Event()
            return self._spawn_done

    def _spawn(self, done: threading.Event) -> None:
        """Spawn the helper, then reap it (no zombie in a kernel that runs job after job)."""
        try:
            self.helper = start_helper(self.spool_dir, helper_environment(self.plan))
        except Exception as exc:  # noqa: BLE001 - tracking must not stop the job
            self.setup_error = f"cannot start the forwarding helper: {type(exc).__name__}: {exc}"
        finally:
            done.set()
        if self.helper is not None:
            self.helper.wait()

    def finish(self, result: ResultView | None, last: bool = True, waiting: Callable[[], object] | None = None,
               gone: Sequence[str] = (), launcher_bytes: dict[str, int] | None = None) -> DeliveryReport:
        """`launcher_bytes`: rank label -> bytes the launcher itself appended to that rank's
        spool (its system samples): when that is all a spool holds, nobody waits for it."""
        self._ranks_ended.set()
        self.start()  # the ranks may have failed to start: the runs are still created and ended
        timeout = offsets.drain_timeout(30)
        # a restart follows: the parent stays open; else this server reports its end on it
        JobEnd(final_status(result), time.time() + timeout, reason=end_reason(result),
               last=last, gone=list(gone)).save(self.spool_dir)
        if self._spawn_done is not None:
            self._spawn_done.wait()
        if self.helper is not None and self.helper.stdin is not None:
            try:
                self.helper.stdin.close()  # wakes the helper: the job ended
            except OSError:
                pass
        labels = offsets.spool_labels(self.spool_dir)
        # a job whose ranks logged nothing of their own: the helper delivers the launcher's
        # samples on its own, after the launcher returned (MLflow's import alone takes seconds)
        sampled = launcher_bytes or {}
        background = bool(sampled) and all(
            _size(offsets.spool_path(self.spool_dir, label)) <= sampled.get(label, 0) + 1
            for label in labels)  # + 1: the newline a writer adds after a cut line
        drained = (offsets.all_delivered(self.spool_dir, labels) if background
                   else self._wait_delivered(timeout, waiting))  # offset files only: no sink here
        error = self._helper_error() or ("" if drained or background
                                         else server_down(self.config.tracking_uri))
        counts = offsets.totals(self.spool_dir, labels)
        return delivery_report(self.sink, self.spool_dir, counts, self.config, self.plan.job_id,
                               drained, error, background=background)

    def _wait_delivered(self, timeout: float, waiting: Callable[[], object] | None = None) -> bool:
        """Poll the offset files (no sink in this process) until every complete line is
        delivered, the helper is gone, or the deadline. `waiting()`: before the first pause."""
        deadline = time.monotonic() + timeout
        pause = FIRST_POLL_S
        while True:
            if offsets.all_delivered(self.spool_dir, offsets.spool_labels(self.spool_dir)):
                return True
            if self.helper is None or self.helper.poll() is not None or time.monotonic() >= deadline:
                return False
            if waiting is not None:
                waiting()
                waiting = None
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, MAX_POLL_S)

    def _helper_error(self) -> str:
        status = HelperStatus.load(self.spool_dir)
        error = self.setup_error or (status.error if status else "")
        if not error and self.helper is not None and self.helper.poll() not in (None, 0):
            error = f"the forwarding helper exited with code {self.helper.returncode} (see {os.path.join(self.spool_dir, 'helper.log')})"
        return error


def server_down(uri: str | None) -> str:
    """Why points still wait, when the helper could not say (it may sit in MLflow's HTTP
    retries of a request the dying server never answered): a stdlib probe of an http store."""
    if not uri or not uri.startswith(("http://", "https://")):
        return ""
    import urllib.request  # here: ssl and http.client, for a failed drain only
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=2):
            return ""
    except OSError as exc:
        return f"MLflow server {uri} unreachable ({type(exc).__name__})"


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def delivery_report(sink: str, spool_dir: str, counts: offsets.Counts, config: SinkConfig,
                    job_id: str, drained: bool, error: str = "",
                    background: bool = False) -> DeliveryReport:
    notes = []
    if background and counts.pending:
        notes.append(f"the ranks logged no metrics; the launcher's {counts.pending} system-metric "
                     "points go to the store in the background")
    elif counts.pending:
        why = error or ("drain timed out" if not drained else "not yet forwarded")
        notes.append(f"{counts.pending} records wait in {spool_dir} ({why}); deliver them with "
                     f"`platform-run sync {job_id}`")
    elif error:
        notes.append(f"tracking: {error}")
    if counts.partial_lines:
        notes.append(f"{counts.partial_lines} rank(s) stopped mid-line: that last line is ignored")
    if counts.skipped:
        notes.append(f"{counts.skipped} unreadable spool lines skipped, set aside with the reason "
                     f"in {spool_dir}/rank_*.jsonl.rejected")
    if counts.rejected:
        notes.append(f"{counts.rejected} records refused by {sink} for good (or no valid "
                     f"record), set aside with the reason in {spool_dir}/rank_*.jsonl.rejected")
    if counts.refused:
        notes.append(f"{counts.refused} records refused in the ranks: over MLflow's size limits "
                     "(see the ranks' warnings)")
    if counts.quarantined:
        notes.append(f"{counts.quarantined} spool lines too large to deliver, kept in "
                     f"{spool_dir}/rank_*.jsonl.quarantine")
    saved = SinkConfig.load(spool_dir) or config
    hint = (f"{sink}: {counts.delivered} records delivered{_into(sink, saved)}"
            + (f"; {notes[0]}" if notes else ""))
    if sink == "mlflow" and counts.delivered and not background:  # compare needs a metric
        hint += f"; compare ranks: {compare_hint(job_id)}"
    return DeliveryReport(sink=sink, delivered=counts.delivered, pending=counts.pending,
                          reason="; ".join(notes), parent_run_id=saved.parent_run_id,
                          ui_hint=hint, skipped=counts.skipped, rejected=counts.rejected,
                          spool_dir=spool_dir, refused=counts.refused,
                          quarantined=counts.quarantined)


def _into(sink: str, config: SinkConfig) -> str:
    """Which MLflow experiment the runs are in (the notebook's, the project folder's or
    MLFLOW_EXPERIMENT_NAME: the user sees which one it was), clipped to stay one line."""
    name = config.experiment_name
    if sink != "mlflow" or not name:
        return ""
    return f" (experiment {name if len(name) <= 60 else name[:57] + '...'!r})"


def workers(plan: PlanView) -> list[RankView]:
    return [r for r in plan.ranks if getattr(r, "role", "worker") == "worker"]


def job_environment(plan: PlanView) -> dict:
    """What the ranks will see (the process env plus .env values the launcher merged in), so
    MLFLOW_TRACKING_URI or PLATFORM_TRACKING from a .env file count here too."""
    ranks = workers(plan)
    return {**os.environ, **(dict(ranks[0].env) if ranks else {})}


def local_store_notes(config: SinkConfig, plan: PlanView) -> list[str]:
    servers = config.job.get("servers", 1)
    if servers > 1 and (config.tracking_uri or "").startswith("sqlite:"):
        return [f"tracking: this job spans {servers} servers but the MLflow store is a local "
                f"sqlite file ({config.tracking_uri}): each server keeps only its own ranks. Run "
                "`platform-run server` and set MLFLOW_TRACKING_URI on every server (README, "
                "multi-server)"]
    env, ranks = job_environment(plan), workers(plan)
    if config.tracking_uri and not env.get("MLFLOW_TRACKING_URI"):
        # a .env the user meant to be read and was not (wrong folder) is silent otherwise
        looked = env_file_paths(str(ranks[0].cwd if ranks and ranks[0].cwd else os.getcwd()), env)
        said = (tuple(looked), config.tracking_uri)  # once per process: a kernel's 2nd job
        if not any(os.path.lexists(path) for path in looked) and said not in _SAID_NO_ENV:
            _SAID_NO_ENV.add(said)  # would repeat it in every cell, and it has not changed
            return [f"tracking: no .env found ({', '.join(looked)}): runs go to the local store "
                    f"{config.tracking_uri}"]
    return []


_SAID_NO_ENV: set[tuple] = set()  # the folders and store "no .env found" was said of


def end_reason(result: ResultView | None) -> str:
    cause = getattr(result, "root_cause", None)
    if cause is not None:
        return f"{cause.label} {cause.how}"
    return str(getattr(result, "reason", "") or "")


def final_status(result: ResultView | None) -> str:
    """MLflow RunStatus of a job: an interrupted job was KILLED, it did not fail."""
    if getattr(result, "ok", False):
        return "FINISHED"
    return "KILLED" if getattr(result, "status", "") == "interrupted" else "FAILED"


def helper_environment(plan: PlanView) -> dict:
    """The launcher's environment plus the sink settings the ranks got from a .env file
    (MLflow credentials and HTTP timeouts, the wflogger call timeout), so the helper talks to the
    store as the ranks would."""
    ranks = workers(plan)
    extra = {k: v for k, v in (dict(ranks[0].env) if ranks else {}).items()
             if k.startswith(("MLFLOW_", "PLATFORM_WFLOGGER_"))}
    return {**os.environ, **extra}


def job_sink_config(sink_name: str, plan: PlanView, layout: str) -> SinkConfig:
    ranks_ = workers(plan)
    first_env = job_environment(plan)
    cwd = ranks_[0].cwd if ranks_ else None
    host = socket.gethostname()
    tags = {
        "job_id": plan.job_id,
        "mode": PLATFORM_RUN_MODE.raw(first_env),
        "command": " ".join(map(str, plan.command)) if not isinstance(plan.command, str) else plan.command,
        "backend": str(plan.backend),
        "world_size": str(plan.world_size),
        "servers": str(getattr(plan, "nnodes", 1)),
        "rank_table": rank_table_summary(first_env.get("RANK_TABLE_FILE")),
    }
    tags.update({f"env.{k}": first_env[k] for k in PLATFORM_VARIABLES if first_env.get(k)})
    ranks = {
        str(r.rank_id): {"rank_id": r.rank_id, "device_id": r.device_id,
                         "server_id": PLATFORM_SERVER_ID.raw(r.env) or host, "host": host,
                         "log_path": str(r.log_path) if r.log_path else None}
        for r in ranks_
    }
    source, source_type = conventions.source(first_env, plan.command, cwd)
    return SinkConfig(
        sink=sink_name, layout=layout,
        tracking_uri=conventions.default_store(cwd, first_env)[0] if sink_name == "mlflow" else None,
        experiment_name=conventions.experiment_name(first_env, cwd),
        job={"job_id": plan.job_id, "job_name": plan.job_name, "run_name": plan.job_id,
             "servers": int(getattr(plan, "nnodes", 1) or 1),  # one parent for all servers
             "server_id": str(getattr(plan, "server_id", "localhost")),
             # node 0 creates the parent, the others find it; started_ms: where an attempt's
             # points begin in a run that goes on across attempts (sinks/mlflow_job.py)
             "node_rank": int(getattr(plan, "node_rank", 0) or 0),
             "attempt_number": int(getattr(plan, "attempt", 1) or 1), "started_ms": int(time.time() * 1000),
             "parent": True, "tags": tags, "user": conventions.user(), "source": source,
             "source_type": source_type, "params": conventions.notebook_parameters(first_env)},
        ranks=ranks,
    )


def rank_table_summary(path: str | None) -> str:
    if not path:
        return "none"
    try:
        table = load_rank_table(path)
        servers = ", ".join(f"{s.server_id}:{len(s.devices)}" for s in table.servers)
        return f"{os.path.basename(path)}: {table.rank_size} devices on {len(table.servers)} server(s) ({servers})"
    except Exception:  # noqa: BLE001 - a summary is a tag, not a check (doctor checks)
        return os.path.basename(path)


def start_helper(spool_dir: str, environ: dict | None = None) -> subprocess.Popen:
    """Start the forwarding helper (tracking/delivery/helper.py) for a spool folder; the caller reaps
    it (`JobTracking._spawn`)."""
    env = dict(os.environ if environ is None else environ)
    # the folder that holds platform_plugin/ (this file is platform_plugin/tracking/job/handle.py)
    package_root = os.path.normpath(os.path.join(os.path.realpath(__file__), *[os.pardir] * 4))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env[PLATFORM_TRACKING_HELPER.name] = str(spool_dir)
    # One request must not outlive the drain deadline by minutes: the helper retries whole passes
    # itself (exactly once through the offsets), so MLflow's own chain (7 retries, backoff up to
    # 2 min) against a dead server only delays giving up. A user's own settings win.
    env.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    env.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    with open(os.path.join(spool_dir, "helper.log"), "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "platform_plugin.tracking.delivery.helper", str(spool_dir)],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log,
                                env=env, start_new_session=True, close_fds=True)
    return proc
