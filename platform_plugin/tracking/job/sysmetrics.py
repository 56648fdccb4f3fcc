"""System metrics per rank, sampled by the launcher: nothing runs in the rank.

Every `interval` seconds a thread in the launcher samples, for each rank, its process tree
(psutil: CPU %, RSS, threads), the machine (CPU %, memory — what MLflow's own monitor logs), the
rank's NPU from `npu-smi info` (AI Core %, HBM) and, when NVML is there (pynvml), its GPU. The
points are appended to the rank's spool like the rank's own metrics, so the forwarder ships them
to the rank's child run under MLflow's `system/` prefix (the run page's "System metrics" tab)
and the parent run gets their per-step aggregates. Step = sample number, as MLflow's monitor.

What one sample reads is in tracking/job/system_samples.py, imported by the sampling thread at its
first interval (a short job never loads it). Names: MLflow's own where MLflow has one
(`system/cpu_utilization_percentage`, `system/system_memory_usage_megabytes|percentage`,
`system/gpu_{i}_utilization_percentage`, `system/gpu_{i}_memory_usage_megabytes|percentage`),
the same pattern otherwise (`system/process_*` for the rank's process tree, `system/npu_{i}_*`
for its NPU).
"""
from __future__ import annotations

import threading

from platform_plugin.tracking.rank.spool import SPOOL_SUFFIX, SpoolWriter

PRIME_S = 1.0  # at most: the CPU baselines are taken this long before the first sample


class SystemMetrics:
    """A Supervisor observer: made before the ranks spawn (its thread starts then), told their
    pids by `started(supervisor)`, stopped by `ended(result)`. `interval <= 0` or no spool: does
    nothing.

    The thread first sleeps: a job shorter than (about) one interval - most `%dist_run` cells
    that fail fast, every no-op - imports nothing (psutil, npu-smi's parser), opens no spool
    and samples nothing. Shortly before the first interval it imports them and takes the CPU
    baselines; the first sample comes at the first interval, then one every interval."""

    def __init__(self, spool_dir: str | None, interval: float, *, npu_smi_exe: str | None = None):
        self.spool_dir = spool_dir or None
        self.interval = interval
        self.npu_smi = npu_smi_exe
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampling = threading.Lock()
        self._writers: dict[str, SpoolWriter] = {}  # rank label -> its spool
        self._procs: list[tuple] | None = None  # (label, pid, device id, env) once started
        if self.enabled:  # now, before the ranks spawn: a thread's start waits for a free core
            self._thread = threading.Thread(target=self._loop, name="system-metrics", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self.spool_dir is not None and self.interval > 0

    def started(self, supervisor) -> None:
        if self.enabled:
            self._procs = [(str(p.spec.rank_id), p.popen.pid, p.spec.device_id, p.spec.env)
                           for p in supervisor.procs if getattr(p.spec, "role", "worker") == "worker"
                           and p.spec.rank_id is not None]

    def ended(self, result) -> None:
        if self._thread is None:
            return
        with self._sampling:  # a sample (or the set-up) in progress completes; none starts after
            self._stop.set()
            for writer in self._writers.values():
                writer.close()

    def _loop(self) -> None:
        prime = min(PRIME_S, self.interval / 2)
        if self._stop.wait(self.interval - prime) or self._procs is None:
            return  # a short job (or none started): nothing imported, nothing sampled
        from platform_plugin.tracking.job.system_samples import Sampler  # psutil: here, not at the top
        # psutil's import and the baselines outside the lock: `ended` never waits for an import
        sampler = Sampler(self._procs, self.npu_smi)
        with self._sampling:
            if self._stop.is_set():
                return
            self._open_writers()
        pause = prime  # the first sample at the first interval; the next ones an interval apart
        while not self._stop.wait(pause):
            with self._sampling:
                if self._stop.is_set():
                    return
                sampler.sample(self._writers, self.samples)
                self.samples += 1
            pause = self.interval  # a fixed pause after each sample: never closer than that

    def _open_writers(self) -> None:
        for label, *_ in self._procs or ():
            self._writers[label] = SpoolWriter(f"{self.spool_dir}/rank_{label}{SPOOL_SUFFIX}")
