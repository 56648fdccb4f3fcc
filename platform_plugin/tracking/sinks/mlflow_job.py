"""One MLflow parent run per job, shared by the launchers of every server of the job.

One creator: node 0's forwarding helper (the rank table's first server) creates the parent
(`node_0_parent`); every other server's helper waits for it (`awaited_parent`), found by its
tags `job_id=<id>` and `platform.role=job` in the job's one experiment (node 0 chose both and
sent them over the job link). A rule "the oldest of the parents created" is not enough: under
load a run's start time (the creating client's clock) is not the order in which the store
shows runs, and servers that looked at different moments chose different parents.

Only when node 0's parent does not appear within PARENT_WAIT_S (node 0 tracks elsewhere, or
not at all) does a helper fall back to the race rule (`shared_parent`): look; if there is none,
create one, wait `SETTLE_S`, look again; the oldest (start time, then run id) wins and a loser
deletes its own.

The parent ends when the last server ends: each launcher tags the parent
`platform.server.<server id>` = its status (and reason), reads the tags back and, if every
server of the job has reported, ends the parent FINISHED only when all are FINISHED, else FAILED
(KILLED when the only non-FINISHED ones were interrupted), with `platform.failed_servers`,
after the job-wide aggregates (`before_end`: mlflow_aggregates.py). Of
two launchers ending at the same instant at least the later writer sees both tags; ending the
run twice with the same status is harmless. A server whose launcher vanished is reported (and
its RUNNING runs ended) by the launchers that saw it go over the job link.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from platform_plugin.errors import PlatformPluginError
from platform_plugin.tracking.shared.state import SinkConfig
from platform_plugin.tracking.sinks.mlflow_writers import RunStore

ROLE_TAG = "platform.role"
ROLE_JOB = "job"
SERVER_TAG = "platform.server."  # + server id: that server's final status
FAILED_SERVERS_TAG = "platform.failed_servers"
ATTEMPT_TAG = "attempt"  # the latest attempt (1, 2, ...) that wrote to the run
# + an attempt's number (2, 3, ...): when the launcher started it, ms since the epoch (its clock)
ATTEMPT_STARTED_TAG = "platform.attempt_started."
SETTLE_S = 3.0  # longer than a create_run takes on a loaded server
PARENT_WAIT_S = 60.0  # how long another server's helper waits for node 0's parent
PARENT_POLL_S = 0.5


def made(value: str | None, what: str) -> str:
    """An id `ensure_runs` made before anything here is asked of the store."""
    if value is None:
        raise PlatformPluginError(f"the job's {what} is not made yet (ensure_runs did not finish)")
    return value


def _parents(client: RunStore, config: SinkConfig) -> list:
    """Active runs only (the search's default view: also what the helper's REST client sends)."""
    job_id = config.job.get("job_id", "").replace("'", "\\'")
    runs = client.search_runs([made(config.experiment_id, "experiment")],
                              filter_string=f"tags.job_id = '{job_id}' and "
                                            f"tags.`{ROLE_TAG}` = '{ROLE_JOB}'",
                              max_results=100)
    return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def node_0_parent(client: RunStore, config: SinkConfig, create: Callable[[], str]) -> str:
    """Node 0's helper: the parent of an earlier attempt (or a fallback's), else a new one."""
    found = _parents(client, config)
    return found[0].info.run_id if found else create()


def awaited_parent(client: RunStore, config: SinkConfig, wait_s: float = PARENT_WAIT_S) -> str | None:
    """Another server's helper: node 0's parent once the store shows it, None after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        found = _parents(client, config)
        if found:
            return found[0].info.run_id
        if time.monotonic() >= deadline:
            return None
        time.sleep(PARENT_POLL_S)


def shared_parent(client: RunStore, config: SinkConfig, create: Callable[[], str]) -> str:
    """The job's parent run id: found, or created by `create()` without ever leaving two."""
    found = _parents(client, config)
    if found:
        return found[0].info.run_id
    mine = create()
    time.sleep(SETTLE_S)
    found = _parents(client, config)
    winner = found[0].info.run_id if found else mine
    if winner != mine:
        client.set_tag(mine, "platform.superseded_by", winner)
        client.delete_run(mine)
    return winner


def end_parent(client: RunStore, config: SinkConfig, status: str, reason: str = "",
               before_end: Callable[[], object] | None = None) -> str | None:
    """Record this server's end on the parent; end the parent when every server has, after
    `before_end()` (the job-wide aggregates: mlflow_aggregates.py). Returns the parent's final
    status when this call ended it."""
    parent = made(config.parent_run_id, "parent run")
    if config.servers <= 1:
        client.set_terminated(parent, status)
        return status
    server = config.job.get("server_id", "?")
    client.set_tag(parent, SERVER_TAG + server, f"{status}: {reason}"[:500] if reason else status)
    return report_gone(client, config, config.job.get("gone_servers") or (), before_end)


def report_gone(client: RunStore, config: SinkConfig, gone: Sequence[str], before_end: Callable[[], object] | None = None) -> str | None:
    """Report the servers in `gone` (their launcher vanished) on the parent, then end it when
    every server has reported: end_parent's second half, and all a launcher does when a server
    is lost after this one had reported its own end. Returns the parent's final status when
    this call ended it."""
    parent, server = made(config.parent_run_id, "parent run"), config.job.get("server_id", "?")
    tags = dict(client.get_run(parent).data.tags)
    lost_now = [lost for lost in gone if lost != server and SERVER_TAG + lost not in tags]
    for lost in lost_now:
        _end_for_gone(client, config, parent, lost, server)
    if lost_now:
        # read again after this launcher's last write: two launchers that end at once then
        # cannot both miss the other's word (each reads after all it wrote)
        tags = dict(client.get_run(parent).data.tags)
    ended = {k[len(SERVER_TAG):]: v.split(":", 1)[0] for k, v in tags.items()
             if k.startswith(SERVER_TAG)}
    if len(ended) < config.servers:
        return None  # another server's ranks still run: its launcher ends the parent
    failed = sorted(s for s, v in ended.items() if v != "FINISHED")
    final = ("FINISHED" if not failed else
             "KILLED" if all(ended[s] == "KILLED" for s in failed) else "FAILED")
    if before_end is not None:  # every server's ranks are in: what the parent holds is final
        before_end()
    if failed:
        client.set_tag(parent, FAILED_SERVERS_TAG, ", ".join(failed))
    client.set_terminated(parent, final)
    return final


def _end_for_gone(client: RunStore, config: SinkConfig, parent: str, gone: str, by: str) -> None:
    """A server whose launcher vanished (SIGKILL, its machine lost) never reports its end: the
    parent would stay RUNNING for good, and so would its ranks' runs. The launcher that saw it
    go (the job link) reports it FAILED and ends its runs still RUNNING; should that server's
    own helper or `sync` end them later, its own word replaces this one."""
    value = f"FAILED: its launcher is gone (reported by {by})"
    client.set_tag(parent, SERVER_TAG + gone, value)
    for run in client.search_runs(
            [made(config.experiment_id, "experiment")], max_results=1000,
            filter_string=f"tags.`mlflow.parentRunId` = '{parent}' and tags.server_id = "
                          f"'{gone}' and attributes.status = 'RUNNING'"):
        client.set_terminated(run.info.run_id, "FAILED")


def attempt_tags(config: SinkConfig) -> dict[str, str]:
    """The attempt's tags for the runs it writes to: its number and, for a restart, when the
    launcher started it (before any of its ranks existed, after every rank of the attempt
    before had ended): where one attempt ends in a run's metric history (docs/tracking.md,
    Restarts)."""
    attempt = attempt_number(config.job)
    tags = {ATTEMPT_TAG: str(attempt)}
    if attempt > 1 and config.job.get("started_ms"):
        tags[ATTEMPT_STARTED_TAG + str(attempt)] = str(config.job["started_ms"])
    return tags


def attempt_number(job: dict) -> int:
    """The attempt (1, 2, ...) a spool folder's job record names. An earlier version's record
    holds "attempt" counted from 0."""
    number = job.get("attempt_number")
    if isinstance(number, int) and number >= 1:
        return number
    old = job.get("attempt")
    return old + 1 if isinstance(old, int) and old >= 0 else 1


def restart(job: dict) -> bool:
    """Whether the job record is a restarted attempt's (2, 3, ...)."""
    return attempt_number(job) > 1


def attempt_starts(tags: dict[str, str]) -> list[int]:
    """A run's attempt boundaries (ms, in order) from its tags: empty for a run of one attempt."""
    starts = []
    for key, value in tags.items():
        if key.startswith(ATTEMPT_STARTED_TAG) and value.isdigit():
            starts.append((int(key[len(ATTEMPT_STARTED_TAG):] or 0), int(value)))
    return [ms for _, ms in sorted(starts)]


def rank_run(client: RunStore, config: SinkConfig, rank_id: str) -> str | None:
    """The run an earlier attempt of the job made for the rank under the job's parent, or None
    (that attempt delivered nothing of it)."""
    parent = made(config.parent_run_id, "parent run").replace("'", "\\'")
    rank = rank_id.replace("'", "\\'")
    runs = client.search_runs([made(config.experiment_id, "experiment")], max_results=100,
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent}' and "
                                            f"tags.rank_id = '{rank}'")
    # several (a job whose store holds a run per attempt of the rank): the latest attempt's
    latest = max(runs, default=None,
                 key=lambda r: (int(r.data.tags.get(ATTEMPT_TAG, "0") or 0), r.info.start_time or 0))
    return None if latest is None else latest.info.run_id


def job_children(client: RunStore, experiment_id: str, parent_run_id: str) -> list:
    """Every rank run of the job, from every server (the store, not the local spool): one per
    rank (a restarted attempt goes on in the rank's run; of a job tracked with a run per
    attempt, the latest attempt's)."""
    # the active runs: the default view of MLflow's client and of mlflow_rest's (no MLflow import)
    runs = client.search_runs([experiment_id],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
                              max_results=10000)
    latest: dict[str, Any] = {}  # rank label -> mlflow Run
    for run in runs:
        label = run.data.tags.get("rank_id")
        if label is None:
            continue
        attempt = int(run.data.tags.get(ATTEMPT_TAG, "0") or 0)
        best = latest.get(label)
        if best is None or attempt > int(best.data.tags.get(ATTEMPT_TAG, "0") or 0):
            latest[label] = run
    return list(latest.values())


def find_job_parent(client: Any, job_id: str) -> Any:  # MLflow's client: its search_experiments
    """The parent run of `job_id` in any experiment (a job started on another server)."""
    from mlflow.entities import ViewType
    job = job_id.replace("'", "\\'")
    experiments = [e.experiment_id for e in client.search_experiments(max_results=1000)]
    if not experiments:
        return None
    runs = client.search_runs(experiments, filter_string=f"tags.job_id = '{job}' and "
                                                         f"tags.`{ROLE_TAG}` = '{ROLE_JOB}'",
                              run_view_type=ViewType.ACTIVE_ONLY, max_results=10)
    return min(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id)) if runs else None
