"""Doctor checks about processes: rank processes running now, and the last job's record.

Running ranks are found through /proc/<pid>/environ of this user's processes (RANK_ID,
DEVICE_ID, JOB_ID, RANK_TABLE_FILE); a process whose parent carries the same RANK_ID is one of
that rank's workers (data loaders, compilers), not another rank, so only the top one counts.
Jupyter kernels are skipped: in the debug environment the kernel itself holds RANK_ID.
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

from platform_plugin.util.jobdirs import JOB_FILE, MAX_JOB_FILE_BYTES, latest_job, log_name
from platform_plugin.util.numbers import whole_number
from platform_plugin.util.procfs import alive, user_processes
from platform_plugin.util.regular_file import read_json, reason
from platform_plugin.ranktable import RankTableError, load, parse_visible_devices

RowTuple = tuple[str, str, str, str]  # (status, check, detail, fix)
KERNEL_MARKERS = ("ipykernel", "jupyter")


@dataclass(frozen=True)
class RankProcess:
    pid: int
    ppid: int
    rank_id: str
    device_id: str | None
    job_id: str | None
    rank_table: str | None  # realpath of RANK_TABLE_FILE
    rank_start: str | None
    visible: str | None
    cmdline: str

    @property
    def physical_device(self) -> str | None:
        try:
            visible = parse_visible_devices(self.visible)
        except RankTableError:
            visible = None
        index = whole_number(self.device_id)
        if index is None or visible is None:
            return self.device_id
        return str(visible[index]) if index < len(visible) else self.device_id


def find_rank_processes() -> list[RankProcess]:
    """This user's processes that carry RANK_ID, one per rank (workers folded into it)."""
    found = {}
    for proc in user_processes("RANK_ID"):
        env, cmdline = proc.env, proc.cmdline
        if any(marker in cmdline for marker in KERNEL_MARKERS):
            continue
        table = env.get("RANK_TABLE_FILE")
        found[proc.pid] = RankProcess(
            proc.pid, proc.ppid, env["RANK_ID"], env.get("DEVICE_ID"), env.get("JOB_ID"),
            os.path.realpath(table) if table else None, env.get("RANK_START"),
            env.get("ASCEND_RT_VISIBLE_DEVICES"), cmdline)
    return [p for p in found.values()
            if not (p.ppid in found and found[p.ppid].rank_id == p.rank_id)]


def rank_process_rows(table_file: str | None,
                      processes: list[RankProcess] | None = None) -> list[RowTuple]:
    """Duplicates, identical double launches and missing ranks among running rank processes.

    With `table_file`, only ranks started with that RANK_TABLE_FILE are considered.
    """
    procs = find_rank_processes() if processes is None else processes
    if table_file:
        procs = [p for p in procs if p.rank_table == table_file]
    if not procs:
        return [("OK", "running ranks", "no rank processes of this user are running", "")]
    rows: list[RowTuple] = []
    by_rank = defaultdict(list)
    for p in procs:
        by_rank[(p.rank_table, p.rank_id)].append(p)
    for (_table, rank), group in sorted(by_rank.items(), key=lambda kv: str(kv[0])):
        if len(group) < 2:
            continue
        pids = ", ".join(str(p.pid) for p in group)
        if len({p.cmdline for p in group}) == 1:
            rows.append(("FAIL", "running ranks", f"the same launch runs twice: RANK_ID={rank} "
                         f"in pids {pids} ({group[0].cmdline[:60]})", "stop the older "
                         "launch (e.g. a cell run again): kill its pids"))
        else:
            rows.append(("FAIL", "running ranks", f"RANK_ID={rank} is used by {len(group)} "
                         f"processes: pids {pids}", "each rank runs once: stop the extra ones"))
    by_device = defaultdict(list)
    for p in procs:
        if p.rank_table and p.physical_device is not None:  # DEVICE_ID means an NPU only with HCCL
            by_device[p.physical_device].append(p)
    for device, group in sorted(by_device.items()):
        if len({p.rank_id for p in group}) > 1 or len(group) > 1:
            pids = ", ".join(f"{p.pid} (rank {p.rank_id})" for p in group)
            rows.append(("FAIL", "running ranks", f"NPU {device} is used by {len(group)} "
                         f"processes: {pids}", "one rank per NPU: stop the extra ones"))
    rows.extend(_missing_rows(procs))
    if not rows:
        rows.append(("OK", "running ranks", f"{len(procs)} rank process(es), no duplicates", ""))
    return rows


def _missing_rows(procs: list[RankProcess]) -> list[RowTuple]:
    """Fewer ranks running than this server's share of the table: some exited early."""
    rows = []
    groups = defaultdict(list)
    for p in procs:
        if p.rank_table:
            groups[(p.rank_table, p.rank_start, p.job_id)].append(p)
    for (table_file, rank_start, job_id), group in groups.items():
        try:
            table = load(table_file)
        except RankTableError:
            continue  # the rank-table check reports a broken table
        start = whole_number(rank_start)
        server = next((s for s in table.servers if s.devices and s.first_rank == start), None)
        if server is None and len(table.servers) == 1:
            server = table.servers[0]
        if server is None:
            continue
        running = {p.rank_id for p in group}
        missing = [r for r in server.rank_ids if str(r) not in running]
        if missing:
            job = f" of job {job_id}" if job_id else ""
            rows.append(("FAIL", "running ranks", f"{len(running)} of {len(server.rank_ids)} "
                         f"ranks{job} on server {server.server_id} are running; missing rank(s) "
                         f"{', '.join(map(str, missing))}", "they exited early or never "
                         "started: read their logs, then stop the job and start it again"))
    return rows


def last_job_rows(log_dir: str) -> list[RowTuple]:
    """Ranks of the newest job in `log_dir` that exited early (tolerant of missing/odd files)."""
    job_dir = latest_job(log_dir)
    if job_dir is None:
        return [("SKIP", "last job", f"no job.json under {log_dir}: no job to inspect", "")]
    path = os.path.join(job_dir, JOB_FILE)
    try:
        data = read_json(path, MAX_JOB_FILE_BYTES, within=str(job_dir))
        state = data.get("state")
        job_id = (data.get("plan") or {}).get("job_id") or os.path.basename(os.path.dirname(path))
    except (OSError, ValueError, AttributeError) as exc:
        return [("SKIP", "last job", f"cannot read {path}: {reason(exc)}", "")]
    if state == "running" and alive(data.get("supervisor_pid")):
        dead = sorted(name for name, pid in (data.get("pids") or {}).items() if not alive(pid))
        if dead:
            return [("FAIL", "last job", f"job {job_id} is running but rank(s) "
                     f"{', '.join(dead)} already exited", f"read "
                     f"{os.path.join(job_dir, log_name(dead[0]))}; the launcher stops the others shortly")]
        return [("OK", "last job", f"job {job_id} is running, all ranks alive", "")]
    result = data.get("result") or {}
    if state == "ended" and result.get("ok"):
        return [("OK", "last job", f"job {job_id} succeeded", "")]
    if state == "ended":
        cause = result.get("root_cause") or {}
        who = f"rank {cause.get('name')} exit {cause.get('exitcode')}" if cause else "see logs"
        return [("WARN", "last job", f"job {job_id} {result.get('status', 'failed')}: {who}",
                 f"read {os.path.dirname(path)}")]
    return [("WARN", "last job", f"job {job_id} never finished (state {state!r}, its "
             "supervisor is gone): its ranks may have been killed", f"read "
             f"{os.path.dirname(path)}")]
