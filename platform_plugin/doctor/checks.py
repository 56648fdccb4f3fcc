"""`platform-run doctor`: the platform's checklist as OK / WARN / FAIL / SKIP rows, each with its
fix.

`CHECKS` is the registry; each check gets a `Context` and returns rows. A check that cannot
run here (no rank table, no npu-smi) says so with SKIP instead of failing: on a CPU machine the
doctor still runs every check it can. Only FAIL makes the exit code non-zero.
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import textwrap
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from platform_plugin import ranktable, settings
from platform_plugin.doctor.processes import last_job_rows, rank_process_rows
from platform_plugin.doctor.pythons import python_rows
from platform_plugin.errors import ConfigError, errors_only
from platform_plugin.util.numbers import whole_number
from platform_plugin.util.jobdirs import job_log_dir

class CheckStatus(str, Enum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"  # the only status that makes the exit code non-zero
    SKIP = "SKIP"  # the check cannot run here (no rank table, no npu-smi)

    def __str__(self) -> str:  # f"{status}" / --json show the value on every Python version
        return self.value


STATUSES = tuple(s.value for s in CheckStatus)


@dataclass(frozen=True)
class Row:
    status: CheckStatus
    check: str
    detail: str
    fix: str = ""

    @classmethod
    def from_values(cls, row: tuple[str, str, str, str]) -> Row:
        """A row the lower modules (processes, pythons) give as (status value, check, detail,
        fix): they sit below this one and do not import it."""
        status, check, detail, fix = row
        return cls(CheckStatus(status), check, detail, fix)


@dataclass
class Context:
    mode: str | None = None
    env_file: str | None = None
    flags: dict = field(default_factory=dict)
    log_dir: str | None = None
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: str = field(default_factory=os.getcwd)
    settings: settings.Settings | None = None
    settings_error: ConfigError | None = None

    def resolve(self) -> None:
        try:
            self.settings = settings.resolve(self.mode, environ=self.environ,
                                             env_file=self.env_file, flags=self.flags,
                                             cwd=self.cwd)
        except ConfigError as exc:
            self.settings_error = exc

    @property
    def table_file(self) -> str | None:
        if self.settings is not None:
            return self.settings.rank_table_file
        value = self.flags.get("RANK_TABLE_FILE") or self.environ.get("RANK_TABLE_FILE")
        return os.path.join(self.cwd, value) if value else None


def check_settings(ctx: Context) -> list[Row]:
    if ctx.settings_error is not None:
        return [Row(CheckStatus.FAIL, "variables", str(p)) for p in
                ctx.settings_error.problems]
    s = ctx.settings
    assert s is not None  # settings are loaded whenever loading them raised no error
    rows = [Row(CheckStatus.OK, "variables", f"mode {s.mode} ({s.mode_source}); RANK_START={s.rank_start}"
                + (f", RANK_ID={s.rank_id}, DEVICE_ID={s.device_id}" if s.mode == "debug" else ""))]
    rows += [Row(CheckStatus.WARN, "variables", str(p)) for p in s.problems]
    return rows


def check_rank_table(ctx: Context) -> list[Row]:
    path = ctx.table_file
    if not path:
        return [Row(CheckStatus.SKIP, "rank table", "no RANK_TABLE_FILE: nothing to check (CPU/GPU runs "
                    "need none)", "set RANK_TABLE_FILE or pass --rank-table for Ascend runs")]
    try:
        table, problems = ranktable.check_file(path)
    except ranktable.RankTableError as exc:
        table, problems = None, exc.problems
    errors = errors_only(problems)
    if table is None or errors:
        return [Row(CheckStatus.FAIL, "rank table", f"{path}: {p}", "fix the table or regenerate it "
                    "(`platform-run ranktable generate`)") for p in errors or problems]
    return [Row(CheckStatus.OK, "rank table", f"{path}: {ranktable.rank_summary(table)}")] + [
        Row(CheckStatus.WARN, "rank table", str(p)) for p in problems]


def _table(ctx: Context) -> ranktable.RankTable | None:
    if ctx.settings is not None and ctx.settings.rank_table is not None:
        return ctx.settings.rank_table
    try:
        return ranktable.load(ctx.table_file) if ctx.table_file else None
    except ranktable.RankTableError:
        return None


def check_environment(ctx: Context) -> list[Row]:
    table = _table(ctx)
    if table is None:
        return [Row(CheckStatus.SKIP, "env vs table", "no valid rank table to compare RANK_ID / "
                    "RANK_START / DEVICE_ID with")]
    # RANK_SIZE has its own row; what the "variables" row already reported is not repeated
    reported = {(p.code, p.path) for p in (ctx.settings_error.problems
                                           if ctx.settings_error else ())}
    found = [p for p in ranktable.check_environment(table, ctx.environ)
             if p.code != "RT_ENV_RANK_SIZE"]
    problems = [p for p in found if (p.code, p.path) not in reported]
    if found and not problems:
        return []  # the FAIL rows of "variables" say it all
    if not problems:
        shown = ", ".join(f"{n}={ctx.environ[n]}" for n in ("RANK_START", "RANK_ID", "DEVICE_ID")
                          if n in ctx.environ) or "none of RANK_START/RANK_ID/DEVICE_ID set"
        return [Row(CheckStatus.OK, "env vs table", shown)]
    return [Row(CheckStatus.FAIL, "env vs table", str(p), "unset it, or set the value the message "
                "names") for p in problems]


def check_rank_size(ctx: Context) -> list[Row]:
    table = _table(ctx)
    if table is None:
        return [Row(CheckStatus.SKIP, "RANK_SIZE", "no valid rank table to derive it from")]
    value = ctx.environ.get("RANK_SIZE")
    if value is None:
        return [Row(CheckStatus.OK, "RANK_SIZE", f"not set; derived value is {table.rank_size}")]
    problems = ranktable.check_environment(table, {"RANK_SIZE": value})
    if problems:
        return [Row(CheckStatus.FAIL, "RANK_SIZE", problems[0].message,
                    f"unset RANK_SIZE or set RANK_SIZE={table.rank_size}")]
    return [Row(CheckStatus.OK, "RANK_SIZE", f"{value} = devices in the table")]


# ulimit -n / -u: MindSpore's launch scripts raise them; ranks open many files and threads
LIMITS = [("open files (ulimit -n)", resource.RLIMIT_NOFILE, 4096, 65536, "ulimit -n 65536"),
          ("user processes (ulimit -u)", resource.RLIMIT_NPROC, 4096, 65536, "ulimit -u unlimited")]


def check_ulimits(ctx: Context) -> list[Row]:
    rows = []
    for label, which, minimum, advised, fix in LIMITS:
        soft, _hard = resource.getrlimit(which)
        shown = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
        if soft != resource.RLIM_INFINITY and soft < minimum:
            rows.append(Row(CheckStatus.FAIL, "ulimit", f"{label} is {shown}, below {minimum}",
                            f"`{fix}` before starting Jupyter / the job"))
        elif soft != resource.RLIM_INFINITY and soft < advised:
            rows.append(Row(CheckStatus.WARN, "ulimit", f"{label} is {shown}; {advised}+ advised for 8 "
                            "ranks", f"`{fix}`"))
        else:
            rows.append(Row(CheckStatus.OK, "ulimit", f"{label} is {shown}"))
    return rows


def check_npu_smi(ctx: Context) -> list[Row]:
    exe = shutil.which("npu-smi", path=ctx.environ.get("PATH"))
    if exe is None:
        return [Row(CheckStatus.SKIP, "npu-smi", "npu-smi not found: cannot count NPUs here (no Ascend "
                    "driver; fine on CPU/GPU)", "on Ascend, add /usr/local/sbin to PATH")]
    try:
        out = subprocess.run([exe, "info", "-l"], capture_output=True, text=True, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Row(CheckStatus.FAIL, "npu-smi", f"`npu-smi info -l` failed: {exc}",
                    "check the Ascend driver (npu-smi info)")]
    count = next((whole_number(line.split(":")[1]) for line in out.splitlines()
                  if "Total Count" in line and whole_number(line.split(":")[1]) is not None), None)
    if count is None:
        return [Row(CheckStatus.FAIL, "npu-smi", "`npu-smi info -l` printed no 'Total Count'",
                    "check the Ascend driver (npu-smi info)")]
    server = ctx.settings.server if ctx.settings else None
    needed = len(server.devices) if server else 0
    if server is not None and needed > count:
        return [Row(CheckStatus.FAIL, "npu-smi", f"npu-smi sees {count} NPU(s); the table puts {needed} "
                    f"ranks on server {server.server_id}", "use a table for the cards present")]
    return [Row(CheckStatus.OK, "npu-smi", f"npu-smi sees {count} NPU(s)")]


def check_rank_processes(ctx: Context) -> list[Row]:
    return [Row.from_values(row) for row in rank_process_rows(_table_file_filter(ctx))]


def check_last_job(ctx: Context) -> list[Row]:
    log_dir = job_log_dir(ctx.log_dir, environ=ctx.environ, cwd=ctx.cwd)
    return [Row.from_values(row) for row in last_job_rows(log_dir)]


def check_pythons(ctx: Context) -> list[Row]:
    return [Row.from_values(row) for row in python_rows(ctx.environ)]


def _table_file_filter(ctx: Context) -> str | None:
    # with a table, only ranks of that table are this job's concern (other jobs may share the host)
    return os.path.realpath(ctx.table_file) if ctx.table_file else None


CHECKS: list[Callable[[Context], list[Row]]] = [
    check_settings, check_rank_table, check_environment, check_rank_size,
    check_rank_processes, check_last_job, check_ulimits, check_npu_smi, check_pythons,
]


def run_checks(ctx: Context) -> list[Row]:
    ctx.resolve()
    rows: list[Row] = []
    for check in CHECKS:
        rows.extend(check(ctx))
    return rows


def render(rows: list[Row], width: int = 110) -> str:
    """One line per row (status, check, detail), the fix indented below it; then a count."""
    lines = []
    for row in rows:
        head = f"{row.status:<5} {row.check:<14} "
        lines.append(textwrap.fill(row.detail, width, initial_indent=head,
                                   subsequent_indent=" " * len(head)))
        if row.fix:
            lines.append(textwrap.fill(row.fix, width, initial_indent=" " * len(head) + "fix: ",
                                       subsequent_indent=" " * (len(head) + 5)))
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return "\n".join(lines)
