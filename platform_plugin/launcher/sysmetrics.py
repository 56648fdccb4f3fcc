"""System metrics per rank, sampled by the launcher: nothing runs in the rank.

Every `interval` seconds a thread in the launcher samples, for each rank, its process tree
(psutil: CPU %, RSS, threads), the machine (CPU %, memory — what MLflow's own monitor logs), the
rank's NPU from `npu-smi info` (AI Core %, HBM) and, when NVML is there (pynvml), its GPU. The
points are appended to the rank's spool like the rank's own metrics, so the forwarder ships them
to the rank's child run under MLflow's `system/` prefix (the run page's "System metrics" tab)
and the parent run gets their per-step aggregates. Step = sample number, as MLflow's monitor.

Names: MLflow's own where MLflow has one (`system/cpu_utilization_percentage`,
`system/system_memory_usage_megabytes|percentage`, `system/gpu_{i}_utilization_percentage`,
`system/gpu_{i}_memory_usage_megabytes|percentage`), the same pattern otherwise
(`system/process_*` for the rank's process tree, `system/npu_{i}_*` for its NPU).
"""
from __future__ import annotations

import threading
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    from platform_plugin.tracking.spool import SpoolWriter

PREFIX = "system/"
PRIME_S = 1.0  # at most: the CPU baselines are taken this long before the first sample


def physical_device(device_id, env: dict) -> int | None:
    """DEVICE_ID is renumbered within ASCEND_RT_VISIBLE_DEVICES; npu-smi shows physical ids."""
    if device_id is None:
        return None
    visible = [x.strip() for x in env.get("ASCEND_RT_VISIBLE_DEVICES", "").split(",") if x.strip()]
    if visible and int(device_id) < len(visible) and visible[int(device_id)].isdigit():
        return int(visible[int(device_id)])
    return int(device_id)


class _Tree:
    """One rank's process tree; psutil.Process objects are kept so cpu_percent has a baseline."""

    def __init__(self, pid: int):
        import psutil
        self.psutil = psutil
        self.root = pid
        self.procs: dict[int, Any] = {}  # psutil.Process by pid (psutil is optional)

    def sample(self) -> dict[str, float] | None:
        try:
            root = self.procs.get(self.root) or self.psutil.Process(self.root)
            members = [root, *root.children(recursive=True)]
        except self.psutil.Error:
            return None  # the rank ended
        cpu = rss = threads = 0.0
        alive = {}
        for proc in members:
            proc = self.procs.get(proc.pid, proc)
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
                    threads += proc.num_threads()
                alive[proc.pid] = proc
            except self.psutil.Error:
                continue
        self.procs = alive
        return {"process_cpu_utilization_percentage": cpu, "process_memory_rss_megabytes": rss / 1e6,
                "process_threads": threads}


class SystemMetrics:
    """A Supervisor observer: made before the ranks spawn (its thread starts then), told their
    pids by `started(supervisor)`, stopped by `ended(result)`. `interval <= 0` or no spool: does
    nothing.

    The thread first sleeps: a job shorter than (about) one interval - most `%dist_run` cells
    that fail fast, every no-op - imports nothing (psutil, npu-smi's parser, the spool writer)
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
        self._writers: list[SpoolWriter] = []
        self._ranks: list[tuple[str, _Tree, int | None, SpoolWriter]] = []
        self._nvml = None
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
            for writer in self._writers:
                writer.close()

    def _loop(self) -> None:
        prime = min(PRIME_S, self.interval / 2)
        if self._stop.wait(self.interval - prime) or self._procs is None:
            return  # a short job (or none started): nothing imported, nothing sampled
        trees = self._baselines(self._procs)  # outside the lock: `ended` never waits for an import
        with self._sampling:
            if self._stop.is_set():
                return
            self._open_writers(trees)
        pause = prime  # the first sample at the first interval; the next ones an interval apart
        while not self._stop.wait(pause):
            with self._sampling:
                if self._stop.is_set():
                    return
                self.sample_once()
            pause = self.interval  # a fixed pause after each sample: never closer than that

    def _baselines(self, ranks) -> list:
        """psutil's import and the CPU baselines (the machine's, each rank's process tree)."""
        import shutil

        import psutil
        self.npu_smi = self.npu_smi or shutil.which("npu-smi")
        self._nvml = _nvml()
        psutil.cpu_percent(None)
        trees = []
        for label, pid, device_id, env in ranks:
            tree = _Tree(pid)
            tree.sample()
            trees.append((label, tree, physical_device(device_id, env)))
        return trees

    def _open_writers(self, trees: list) -> None:
        from platform_plugin.tracking.spool import SPOOL_SUFFIX, SpoolWriter
        for label, tree, device in trees:
            writer = SpoolWriter(f"{self.spool_dir}/rank_{label}{SPOOL_SUFFIX}")
            self._writers.append(writer)
            self._ranks.append((label, tree, device, writer))

    def sample_once(self) -> None:
        import json

        import psutil

        from platform_plugin.tracking.spool import encode_metric
        from platform_plugin.util import npu_smi
        now = int(time.time() * 1000)
        memory = psutil.virtual_memory()
        machine = {"cpu_utilization_percentage": psutil.cpu_percent(None),
                   "system_memory_usage_megabytes": memory.used / 1e6,
                   "system_memory_usage_percentage": memory.percent}
        npus = npu_smi.sample(self.npu_smi) if self.npu_smi else {}
        step = self.samples
        for label, tree, device, writer in self._ranks:
            values = tree.sample()
            if values is None:
                continue
            values.update(machine)
            values.update(_npu_values(npus.get(device)) if device is not None else {})
            values.update(_gpu_values(self._nvml, device))
            for name, value in values.items():
                writer.append(encode_metric(json.dumps(PREFIX + name), float(value), step, now))
            writer.flush()
        self.samples += 1


def _npu_values(npu) -> dict[str, float]:
    if npu is None:
        return {}
    out = {}
    if npu.aicore_percent is not None:
        out[f"npu_{npu.npu_id}_utilization_percentage"] = npu.aicore_percent
    if npu.hbm_used_mb is not None:
        out[f"npu_{npu.npu_id}_hbm_usage_megabytes"] = npu.hbm_used_mb
        if npu.hbm_total_mb:
            out[f"npu_{npu.npu_id}_hbm_usage_percentage"] = 100.0 * npu.hbm_used_mb / npu.hbm_total_mb
    return out


def _nvml():
    """pynvml, initialised, or None (optional: no NVIDIA GPU, or the package is not installed)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - ImportError, NVMLError: no GPU metrics
        return None


def _gpu_values(nvml, device) -> dict[str, float]:
    """MLflow's GPU monitor names, for the rank's GPU (its DEVICE_ID / local index)."""
    if nvml is None or device is None:
        return {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(device)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        usage = nvml.nvmlDeviceGetUtilizationRates(handle)
    except Exception:  # noqa: BLE001 - NVMLError: no such device
        return {}
    return {f"gpu_{device}_utilization_percentage": usage.gpu,
            f"gpu_{device}_memory_usage_megabytes": memory.used / 1e6,
            f"gpu_{device}_memory_usage_percentage": 100.0 * memory.used / memory.total}
