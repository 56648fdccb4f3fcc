"""Which store `platform-run sync` sends a job's points to: the one its sink.json names, unless
that sqlite file is gone, or the one `--to URI` names (recorded, so the next sync goes there).

A sqlite store is created by opening it: MLflow (SQLAlchemy) makes a fresh empty database at a
missing path. For a job whose store was moved or deleted that would put the rest of its points into
runs nobody will find, beside a store that no longer exists - silently. A sync refuses that
(TRACKING_STORE_GONE) and says how to name the store where it is now. `--to` moves the job:
- into a store that holds the job's runs (the same store at its new path or URL): the run ids
  and the offsets stay, the rest goes where the first part went, exactly once;
- into a store without them, when nothing went anywhere yet (a URI that never worked): the
  runs are made there;
- else refused (TRACKING_SYNC_TO): part of the job is in the old store, the rest would start a
  second copy of the job with only the tail of its points - unless `--from-start`: the whole
  job is sent again from its spool (which keeps every line), e.g. into a store made anew after
  the old one was lost (the parent run's per-step aggregates are recomputed, as by any sync).
"""
from __future__ import annotations

import os
from typing import Any

from platform_plugin.errors import ConfigError, PlatformPluginError, Problem
from platform_plugin.tracking.delivery.offsets import spool_labels
from platform_plugin.tracking.delivery.reading import REJECTED_SUFFIX
from platform_plugin.tracking.shared.state import HelperStatus, SinkConfig, StreamState, stream_lock
from platform_plugin.tracking.shared.uri_check import check_tracking_uri, sqlite_file, uri_problem
from platform_plugin.tracking.rank.identity import stream_name

GONE, MOVE, AUTH = "TRACKING_STORE_GONE", "TRACKING_SYNC_TO", "TRACKING_AUTH"


def _refuse(code: str, message: str, where: str) -> ConfigError:
    return ConfigError([Problem(code, message, where)])


def refused(what_to_fix: str, job: str) -> ConfigError:
    """The store turned sync's credentials away: a setting to fix, not a failure to retry."""
    return _refuse(AUTH, f"{what_to_fix}; the job's records wait in its spool: platform-run "
                   f"sync {job} once that is fixed", "MLFLOW_TRACKING_USERNAME")


def sent_records(spool_dir: str | os.PathLike[str]) -> int:
    """Records the job's store has taken (delivered or refused for good by it)."""
    states = (StreamState.load(spool_dir, stream_name(label)) for label in spool_labels(spool_dir))
    return sum(state.delivered + state.rejected for state in states)


def run_ids(spool_dir: str | os.PathLike[str], config: SinkConfig) -> list[str]:
    """The runs this job made in its store (the job's run first)."""
    ids = [config.parent_run_id] + [StreamState.load(spool_dir, stream_name(label)).run_id
                                    for label in spool_labels(spool_dir)]
    return list(dict.fromkeys(i for i in ids if i))


def missing_store(config: SinkConfig) -> str | None:
    """The sqlite file the job's URI names when it is not there (None for other stores)."""
    path = sqlite_file(config.tracking_uri or "") if config.sink == "mlflow" else None
    return path if path and path != ":memory:" and not os.path.lexists(path) else None


def check_store_there(spool_dir: str | os.PathLike[str], config: SinkConfig, job: str) -> None:
    """Refuse a sync into a URI no client can use (recorded before the URI check existed, or a
    driver uninstalled since) and a sync that would make a fresh store in place of one the job
    already wrote to."""
    why = uri_problem(config.tracking_uri) if config.sink == "mlflow" and config.tracking_uri else None
    if why:
        raise _refuse("TRACKING_URI", f"the job's store {config.tracking_uri!r} cannot be used: "
                      f"{why}. Name a store that works: platform-run sync {job} --to URI",
                      "sink.json")
    path = missing_store(config)
    if path is None or not (config.experiment_id or run_ids(spool_dir, config)):
        return  # a store this job never opened is made by its first sync, as by the job
    where = " (a relative path: taken from the folder sync runs in)" if not os.path.isabs(path) else ""
    raise _refuse(GONE, f"the job's store {path}{where} is gone (moved or deleted) - it held "
                  f"the job's runs and {sent_records(spool_dir)} record(s) already sent; a sync "
                  "would make a new empty store there. Name where it is now: platform-run sync "
                  f"{job} --to sqlite:////new/path/mlflow.db (or the server that serves it); "
                  "if it is lost, --to URI --from-start sends the whole job again",
                  config.tracking_uri or "sink.json")


def check_runs_there(spool_dir: str | os.PathLike[str], config: SinkConfig, sink: Any, job: str) -> None:
    """A sqlite store at the job's path that does not hold the job's runs (deleted, then made
    anew by a later job or by hand): TRACKING_STORE_GONE, not "Run ... not found" on every
    attempt. Asked only of a local file (a server may be down: that is sync's --wait)."""
    path = sqlite_file(config.tracking_uri or "") if config.sink == "mlflow" else None
    ids = run_ids(spool_dir, config)
    if not path or path == ":memory:" or not ids or not os.path.exists(path):
        return
    if not _holds(sink, config.tracking_uri or "", ids, job):
        raise _refuse(GONE, f"the store {path} does not hold this job's runs ({ids[0]}, ...): it "
                      "was replaced (removed, then made anew). Name where the job's store is now: "
                      f"platform-run sync {job} --to URI; if it is lost, --to URI --from-start "
                      "sends the whole job again", config.tracking_uri or "sink.json")


def move_to(spool_dir: str | os.PathLike[str], config: SinkConfig, uri: str, sink: Any, from_start: bool = False,
            job: str = "JOB") -> bool:
    """Record `uri` as the job's store in sink.json; True when it changed. `sink` answers
    whether the target holds the job's runs (opening only a store that exists). `from_start`:
    into a store without them, the whole job again from its spool (a lost store rebuilt)."""
    check_tracking_uri(uri, "--to")
    if config.sink != "mlflow":
        raise _refuse(MOVE, f"--to names an MLflow store; this job tracks into {config.sink}", "--to")
    if uri == config.tracking_uri and not from_start:
        return False
    _check_no_live_helper(spool_dir, config)
    with stream_lock(spool_dir, "runs", blocking=True):  # a sync of the same job at once
        config = SinkConfig.load(spool_dir) or config
        ids = run_ids(spool_dir, config)
        holds = bool(ids) and _holds(sink, uri, ids, job)
        if holds and from_start:
            raise _refuse(MOVE, f"--to {uri} --from-start: that store holds this job's runs "
                          "already: sending the job again would store every point twice", "--to")
        if not holds:
            sent = sent_records(spool_dir)
            if sent and not from_start:
                raise _refuse(MOVE, f"--to {uri}: that store does not hold this job's runs "
                              f"({', '.join(ids[:2])}{', ...' if len(ids) > 2 else ''}), and "
                              f"{sent} record(s) already went to {config.tracking_uri}: the rest "
                              "there would be a second, partial copy of the job. Move or copy "
                              "the store itself and name it with --to, or send the whole job "
                              "there with --from-start (e.g. the store was lost)", "--to")
            _forget_runs(spool_dir, config, from_start)  # the runs are made in the new store
        config.tracking_uri = uri
        config.save(spool_dir)
    return True


def _holds(sink: Any, uri: str, ids: list[str], job: str) -> bool:
    path = sqlite_file(uri)
    if path is not None and not os.path.exists(path):
        return False  # never opened to ask: opening makes it
    client = sink.client(uri)
    try:
        for run_id in ids:
            client.get_run(run_id)
    except Exception as exc:  # noqa: BLE001 - MLflow's error for a missing run, or the store's
        if getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
            return False
        refuses_access = getattr(sink, "refuses_access", None)
        what_to_fix = refuses_access(uri, exc) if refuses_access else None
        if what_to_fix:
            raise refused(what_to_fix, job) from None
        raise PlatformPluginError(f"--to {uri}: cannot ask it for this job's runs: "
                                  f"{type(exc).__name__}: {exc}") from None
    return True


def _forget_runs(spool_dir: str | os.PathLike[str], config: SinkConfig, from_start: bool = False) -> None:
    """The job's run ids (made anew in the new store); `from_start`: also what was delivered,
    so every line of the spool is sent again (the rank's own refusals are kept: not in the
    spool). The quarantine and rejected files are emptied: the same lines go there again on
    the way."""
    config.experiment_id = config.parent_run_id = None
    config.ended = False
    for label in spool_labels(spool_dir):
        stream = stream_name(label)
        state = StreamState.load(spool_dir, stream)
        if from_start:
            state = StreamState(refused=state.refused)
            for kept in (f"{stream}.jsonl.quarantine", f"{stream}{REJECTED_SUFFIX}"):
                try:
                    os.truncate(os.path.join(spool_dir, kept), 0)
                except FileNotFoundError:
                    pass
        if state.run_id or from_start:
            state.run_id = None
            state.save(spool_dir, stream)


def live_helper(spool_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the job's forwarding helper while it is still at work, else None."""
    helper = HelperStatus.load(spool_dir)
    if helper is not None and helper.phase != "done" and helper.pid and _forwarding(helper.pid):
        return helper.pid
    return None


def _check_no_live_helper(spool_dir: str | os.PathLike[str], config: SinkConfig) -> None:
    """The job's own forwarding helper keeps its store in memory: moving under it would split
    the job between the two stores."""
    pid = live_helper(spool_dir)
    if pid is not None:
        raise _refuse(MOVE, f"the job's forwarding helper (pid {pid}) is still sending to "
                      f"{config.tracking_uri}: run sync --to after it has ended", "--to")


def _forwarding(pid: int) -> bool:
    """`pid` is still a forwarding helper: a killed helper's pid may name another process now."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"platform_plugin.tracking.delivery.helper" in fh.read()
    except OSError:
        return False
