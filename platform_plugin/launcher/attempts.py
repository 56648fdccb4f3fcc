"""What a multi-server or restarted job adds around one supervised attempt: telling the other
servers' launchers that this one stops (and hearing them), starting the next attempt and keeping
every failed one."""
from __future__ import annotations

import os

from platform_plugin.launcher import resume
from platform_plugin.launcher.display.result_table import render_result, terminal_width, wrapped
from platform_plugin.launcher.options import LaunchOptions
from platform_plugin.launcher.planning.plan import Host, LaunchPlan, build_plan
from platform_plugin.launcher.processes.spawn import make_checkpoint_dir

NOTE_INDENT = " " * len("[launcher] ")  # a note's next lines start under its text


class PeerNotice:
    """A supervisor observer and its stop check: when this server's job stops for a reason of
    its own (a rank failed, a timeout, Ctrl-C) the other servers hear it through the job link,
    and this server hears theirs."""

    def __init__(self, link, server_id: str, attempt: int):
        self.link, self.server_id, self.attempt = link, server_id, attempt

    def stopping(self, payload) -> None:
        status, reason = payload
        self.link.tell_failed(self.server_id, reason, self.attempt)

    def stop_reason(self) -> str | None:
        return self.link.stop_reason(self.attempt)


def attempt_record(result, attempt: int, attempts_allowed: int) -> dict:
    """What job.json and the final error keep of a failed attempt (`attempt` of
    `attempts_allowed`): its root-cause table, headed by the attempt (the job went on)."""
    cause = result.root_cause
    return {"attempt": attempt, "status": result.status, "reason": result.reason,
            "duration_s": round(result.duration_s, 3),
            "root_cause": None if cause is None else {
                "name": cause.name, "rank_id": cause.rank_id, "device_id": cause.device_id,
                "host": cause.host, "how": cause.how, "last_lines": cause.last_lines},
            "table": render_result(result, attempt=(attempt, attempts_allowed))}


def keep_attempt_logs(job_dir: str, attempt: int) -> None:
    """Before a restart: move the logs of attempt N (1, 2, ...) into `attempt-N/`, so
    `rank_K.log` is always the current attempt's and every earlier one is kept."""
    target = os.path.join(job_dir, f"attempt-{attempt}")
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(job_dir):
        if name.endswith(".log"):
            os.replace(os.path.join(job_dir, name), os.path.join(target, name))


def restarted(cmd, settings, host: Host, options: LaunchOptions, plan: LaunchPlan, link,
              attempt: int, failed: dict, spool_dir: str, note) -> LaunchPlan:
    """--max-restarts: the plan of attempt `attempt` (>= 2) once every server reached it, same
    job id, resuming from the checkpoint node 0 chose; the earlier attempt's logs kept in
    `attempt-N/`. `failed`: the failed attempt's record, which gets what was resumed and what
    the failure cost (`spool_dir`: that attempt's spools on this server, "" untracked)."""
    proposed = {"job_id": plan.job_id}
    if plan.node_rank == 0:  # node 0 chooses for every server
        proposed.update(resume.proposal(plan, note))
    identity = link.agree(proposed, attempt)
    make_checkpoint_dir(plan.checkpoint_dir)  # (removed meanwhile on this server: made again)
    resumed = resume.resumed(identity, plan, spool_dir, attempt)
    failed["resumed"] = resumed.to_dict()
    note("\n".join(wrapped(resumed.describe(), terminal_width(), NOTE_INDENT))[len(NOTE_INDENT):])
    plan = build_plan(cmd, settings, options, host, job_id=plan.job_id, attempt=attempt,
                      master_port=_port_for(options, plan, attempt), resume_step=resumed.step)
    keep_attempt_logs(plan.job_dir, attempt - 1)
    return plan


def restarting(result, attempt: int, max_restarts: int) -> str:
    """The failed attempt's table, headed by the attempt (not "job ... FAILED": the job goes
    on), and what happens next."""
    return (render_result(result, terminal_width(), attempt=(attempt, max_restarts + 1))
            + f"\n[launcher] restarting the whole job as attempt {attempt + 1} of "
            f"{max_restarts + 1} (--max-restarts)")


def _port_for(options: LaunchOptions, plan: LaunchPlan, attempt: int) -> int | None:
    """A restarted single-server job gets a fresh port (the old scheduler's may linger in
    TIME_WAIT); a multi-server one keeps the port every server was given."""
    if attempt > 1 and options.master_port is None and plan.nnodes == 1:
        return None
    return plan.master_port
