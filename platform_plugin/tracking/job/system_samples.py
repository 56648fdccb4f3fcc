"""What one system-metrics sample reads (tracking/job/sysmetrics.py's thread imports this once
the ranks started): each rank's process tree (psutil), the machine, the rank's NPU from `npu-smi
info` and, when NVML is there (pynvml), its GPU; appended to the rank's spool as `system/*`
metric points, step = sample number."""
from __future__ import annotations

import json
import psutil
import shutil
import time
from typing import Any

from platform_plugin.tracking.rank.spool import encode_metric
from platform_plugin.util import npu_smi

PREFIX = "system/"


def physical_device(device_id: Any, env: dict) -> int | None:
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


class Sampler:
    """Made with the ranks' (label, pid, device id, env): takes the CPU baselines (the
    machine's, each rank's process tree); `sample(writers, step)` then appends one sample."""

    def __init__(self, ranks: Any, npu_smi_exe: str | None = None) -> None:
        self.npu_smi = npu_smi_exe or shutil.which("npu-smi")
        self.nvml = _nvml()
        psutil.cpu_percent(None)
        self.trees = []
        for label, pid, device_id, env in ranks:
            tree = _Tree(pid)
            tree.sample()
            self.trees.append((label, tree, physical_device(device_id, env)))

    def sample(self, writers: dict, step: int, last: bool = False) -> dict[str, int]:
        """`last`: the job's end - a rank whose process tree is gone still gets the machine's
        and its device's values (else a rank that ended gets no more points). Returns the
        bytes appended per rank label."""
        written = {}
        now = int(time.time() * 1000)
        memory = psutil.virtual_memory()
        machine = {"cpu_utilization_percentage": psutil.cpu_percent(None),
                   "system_memory_usage_megabytes": memory.used / 1e6,
                   "system_memory_usage_percentage": memory.percent}
        npus = npu_smi.sample(self.npu_smi) if self.npu_smi else {}
        for label, tree, device in self.trees:
            values = tree.sample()
            writer = writers.get(label)
            if values is None and last:
                values = {}
            if values is None or writer is None:
                continue
            values.update(machine)
            values.update(_npu_values(npus.get(device)) if device is not None else {})
            values.update(_gpu_values(self.nvml, device))
            lines = [encode_metric(json.dumps(PREFIX + name), float(value), step, now)
                     for name, value in values.items()]
            for line in lines:
                writer.append(line)
            writer.flush()
            written[label] = sum(len(line.encode()) for line in lines)
        return written


def _npu_values(npu: Any) -> dict[str, float]:
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


def _nvml() -> Any:
    """pynvml, initialised, or None (optional: no NVIDIA GPU, or the package is not installed)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - ImportError, NVMLError: no GPU metrics
        return None


def _gpu_values(nvml: Any, device: Any) -> dict[str, float]:
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
