"""System metrics per rank, sampled by the launcher: nothing runs in the rank.

Every `interval` seconds a thread in the launcher samples, for each rank, its process tree
(psutil: CPU %, RSS, threads), the machine (CPU %, memory — what MLflow's own monitor logs), the
rank's NPU from `npu-smi info` (AI Core %, HBM) and, when NVML is there (pynvml), its GPU. The
points are appended to the rank's spool like the rank's own metrics, so the forwarder ships them
to the rank's child run under MLflow's `system/` prefix (the run page's "System metrics" tab)
and the parent run gets their per-step aggregates. Step = sample number, as MLflow's monitor.

Every rank run gets them, however short the job: a first sample shortly after the ranks start
(START_S: the CPU baselines are taken that long before), one every `interval` after it, and a
last one when the job ends (the machine and the device; the rank's own process tree is gone
by then, so only the samples while it ran have the `system/process_*` values).

What one sample reads is in tracking/job/system_samples.py, imported by the sampling thread once
the ranks started (not on the launcher's own path). Names: MLflow's own where MLflow has one
(`system/cpu_utilization_percentage`, `system/system_memory_usage_megabytes|percentage`,
`system/gpu_{i}_utilization_percentage`, `system/gpu_{i}_memory_usage_megabytes|percentage`),
the same pattern otherwise (`system/process_*` for the rank's process tree, `system/npu_{i}_*`
for its NPU).
"""
from __future__ import annotations

import threading
from typing import Any

from platform_plugin.tracking.rank.spool import SPOOL_SUFFIX, SpoolWriter

START_S = 0.25  # at most: the first sample, after the CPU baselines (half an interval if shorter)
SETUP_WAIT_S = 10.0  # the job's end waits this long at most for the sampler's imports


class SystemMetrics:
    """A Supervisor observer: made before the ranks spawn (its thread starts then), told their
    pids by `started(supervisor)`, stopped by `ended(result)`, which takes the last sample.
    `interval <= 0` or no spool: does nothing.

    The thread waits for the ranks, imports the sampler (psutil, npu-smi's parser) and takes the
    CPU baselines off the launcher's path, then samples at START_S and every interval after."""

    def __init__(self, spool_dir: str | None, interval: float, *, npu_smi_exe: str | None = None):
        self.spool_dir = spool_dir or None
        self.interval = interval
        self.npu_smi = npu_smi_exe
        self.samples = 0
        self.problem = ""  # why the sampling thread stopped early, if it did
        self.written: dict[str, int] = {}  # rank label -> bytes appended to its spool
        self._stop = threading.Event()
        self._wake = threading.Event()  # the ranks started, or the job ended
        self._ready = threading.Event()  # the thread set up the sampler, or gave up
        self._thread: threading.Thread | None = None
        self._sampling = threading.Lock()
        self._sampler: Any = None  # system_samples.Sampler once the thread made it
        self._writers: dict[str, SpoolWriter] = {}  # rank label -> its spool
        self._procs: list[tuple] | None = None  # (label, pid, device id, env) once started
        if self.enabled:  # now, before the ranks spawn: a thread's start waits for a free core
            self._thread = threading.Thread(target=self._loop, name="system-metrics", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self.spool_dir is not None and self.interval > 0

    def started(self, supervisor: Any) -> None:  # the launcher's Supervisor
        if self.enabled:
            self._procs = [(str(p.spec.rank_id), p.popen.pid, p.spec.device_id, p.spec.env)
                           for p in supervisor.procs if getattr(p.spec, "role", "worker") == "worker"
                           and p.spec.rank_id is not None]
            self._wake.set()

    def ended(self, result: object) -> None:
        """The last sample (before the job's end record: tracking delivers it with the rest)."""
        if self._thread is None:
            return
        self._wake.set()
        if self._procs:  # the ranks started: every run gets its samples, a short job's too
            self._ready.wait(SETUP_WAIT_S)
        with self._sampling:  # a sample (or the set-up) in progress completes; none starts after
            self._stop.set()
            if self._sampler is not None and self._writers:
                self._count(self._sampler.sample(self._writers, self.samples, last=True))
                self.samples += 1
            for writer in self._writers.values():
                writer.close()

    def _loop(self) -> None:
        """The thread: samples are best effort, so whatever fails (a spool on a disk that
        filled, an interpreter shutting down under a late import) ends the sampling and is
        kept in `problem`, never raised as a traceback in the launcher's output."""
        try:
            self._sample_until_stopped()
        except Exception as exc:  # noqa: BLE001 - the job goes on without its system metrics
            self.problem = f"{type(exc).__name__}: {exc}"[:300]
            self._ready.set()

    def _sample_until_stopped(self) -> None:
        try:
            self._wake.wait()
            if self._stop.is_set() or not self._procs:
                return  # no rank started
            from platform_plugin.tracking.job.system_samples import Sampler  # psutil: off the launch path
            # the import and the baselines outside the lock: `ended` waits for them (_ready)
            sampler = Sampler(self._procs, self.npu_smi)
            with self._sampling:
                if self._stop.is_set():
                    return
                self._open_writers()
                self._sampler = sampler
        finally:
            self._ready.set()
        pause = min(START_S, self.interval / 2)  # the first sample: the ranks' start
        while not self._stop.wait(pause):
            with self._sampling:
                if self._stop.is_set():
                    return
                self._count(sampler.sample(self._writers, self.samples))
                self.samples += 1
            pause = self.interval  # a fixed pause after each sample: never closer than that

    def _count(self, written: dict) -> None:
        for label, size in written.items():
            self.written[label] = self.written.get(label, 0) + size

    def _open_writers(self) -> None:
        for label, *_ in self._procs or ():
            self._writers[label] = SpoolWriter(f"{self.spool_dir}/rank_{label}{SPOOL_SUFFIX}")
