"""The comparison's diagnosis: why a straggler is slow, when the data says it: its pace against
the median, and what the launcher's system metrics of that rank (system/…,
tracking/job/sysmetrics.py) show against the other ranks' — CPU starved (its processes got far
less CPU than the others' while the machine was saturated), memory pressure (the machine's
memory nearly full, or its RSS far above the others'). Nothing is claimed that the data does
not show: without system metrics only the pace is given."""
from __future__ import annotations

import statistics

from platform_plugin.tracking.rank.identity import run_name

CPU = "system/process_cpu_utilization_percentage"
MACHINE_CPU = "system/cpu_utilization_percentage"
RSS = "system/process_memory_rss_megabytes"
MACHINE_MEMORY = "system/system_memory_usage_percentage"
SYSTEM_KEYS = (CPU, MACHINE_CPU, RSS, MACHINE_MEMORY)

STARVED_SHARE = 0.75  # its CPU below 75 % of the others' median ...
SATURATED_PERCENT = 90.0  # ... while the machine is this busy: starved, not merely waiting
MEMORY_FULL_PERCENT = 90.0
RSS_FACTOR = 1.5


def system_summary(values_of, labels) -> dict[str, dict[str, float]]:
    """label -> {system metric: its mean over the job (memory: its peak)}; ranks without
    system metrics are left out. `values_of(label, key)`: the rank's values of a metric (from
    its spool or from the store)."""
    out: dict[str, dict[str, float]] = {}
    for label in labels:
        values = {}
        for key in SYSTEM_KEYS:
            points = values_of(label, key)
            if points:
                values[key] = max(points) if key in (RSS, MACHINE_MEMORY) else statistics.fmean(points)
        if values:
            out[label] = values
    return out


def _median_of_others(system: dict[str, dict[str, float]], label: str, key: str) -> float | None:
    others = [v[key] for lb, v in system.items() if lb != label and key in v]
    return statistics.median(others) if others else None


def straggler_reasons(row, rows, system: dict[str, dict[str, float]]) -> list[str]:
    """Sentences saying why `row` (the straggler) is slow."""
    rated = [r.steps_per_s for r in rows if r.steps_per_s is not None]
    reasons = []
    if row.steps_per_s is not None and rated:
        median = statistics.median(rated)
        reasons.append(f"its pace {row.steps_per_s:.4g} vs the median {median:.4g} "
                       f"({100 * (row.steps_per_s / median - 1):+.0f}%)")
    mine = system.get(row.label, {})
    cpu, cpu_others = mine.get(CPU), _median_of_others(system, row.label, CPU)
    machine = mine.get(MACHINE_CPU)
    if (cpu is not None and cpu_others and cpu < STARVED_SHARE * cpu_others
            and machine is not None and machine >= SATURATED_PERCENT):
        reasons.append(f"CPU starved: its processes got {cpu:.0f}% CPU vs {cpu_others:.0f}% for "
                       f"the other ranks while the machine ran at {machine:.0f}%")
    memory = mine.get(MACHINE_MEMORY)
    if memory is not None and memory >= MEMORY_FULL_PERCENT:
        reasons.append(f"memory pressure: the machine's memory reached {memory:.0f}%")
    rss, rss_others = mine.get(RSS), _median_of_others(system, row.label, RSS)
    if rss is not None and rss_others and rss > RSS_FACTOR * rss_others:
        reasons.append(f"memory: its RSS peaked at {rss:.0f} MB vs {rss_others:.0f} MB for the "
                       "other ranks")
    return reasons


def render(rows, system: dict[str, dict[str, float]]) -> list[str]:
    lines = []
    for row in rows:
        if "straggler" in row.flags:
            reasons = straggler_reasons(row, rows, system)
            lines.append(f"straggler {run_name(row.label)}: " + "; ".join(reasons))
            if not system:
                lines.append("  (no system metrics in this job: run with them on to see CPU and "
                             "memory per rank)")
        if "deviates" in row.flags:
            lines.append(deviation_line(row, rows))
    return lines


def deviation_line(row, rows) -> str:
    """Why a rank is flagged `deviates`: where its end value lies against the others'."""
    others = statistics.median(r.end for r in rows if r is not row)
    gap = (row.end - others) / abs(others) * 100 if others else float("inf")
    return (f"deviates {run_name(row.label)}: its end value (the mean of its last tenth of "
            f"points) {row.end:.4g} vs the other ranks' median {others:.4g} ({gap:+.0f}%), an "
            "outlier among them; in data parallel look at its data shard, its seed, or whether "
            "it stopped learning")
