"""What the installed MLflow offers beyond the tracking API, found without importing it.

The package supports MLflow 3.1 (the newest pip finds for Python 3.9) up to 3.x. Runs,
params, metrics, tags and artifacts work the same on all of them; what differs is the web UI:
MLflow 3.1's UI does not know experiment kinds (the `mlflow.experimentKind` tag the sink
sets is then only a tag). Instead of guessing from version numbers, this looks into the
installed UI build for what the package relies on, and says what is missing:

    features = detect()          # None: MLflow is not installed in this interpreter
    for line in features.missing(): print(line)

`platform-run doctor` and `platform-run ui` print it.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import mmap
from dataclasses import dataclass
from pathlib import Path

# what the package relies on -> a string only a UI build that has it contains
UI_NEEDLES = {
    "experiment_kinds": b"custom_model_development",  # the value the sink gives the kind tag
    "metric_page": b'"/metric/*"',                     # the page compare.metric_url links to
    "system_metrics_tab": b"System metrics",           # the run page's tab for system/ keys
}
# MLflow's own system-metric names that tracking/job/sysmetrics.py reuses for the same values
SYSTEM_METRIC_NAMES = ("cpu_utilization_percentage", "system_memory_usage_megabytes",
                       "system_memory_usage_percentage")

MISSING_TEXT = {
    "ui": "no web UI in this MLflow (mlflow-skinny?): `platform-run ui` and the comparison "
          "links need the full `mlflow` package",
    "experiment_kinds": "its UI does not know experiment kinds (tag mlflow.experimentKind, "
                        "newer MLflow 3.x): experiments open on the plain runs table",
    "metric_page": "its UI has no metric page (#/metric): compare the ranks with "
                   "`platform-run compare`, or select the runs in the experiment's table",
    "system_metrics_tab": "its UI has no System metrics tab: the launcher's system/ metrics "
                          "are listed among the run's metrics",
    "system_metric_names": "its system metrics use other names than "
                           f"{', '.join(SYSTEM_METRIC_NAMES)}: the launcher's samples and "
                           "MLflow's own monitor (if enabled) chart separately",
}


@dataclass(frozen=True)
class MlflowFeatures:
    version: str
    ui: bool
    experiment_kinds: bool
    metric_page: bool
    system_metrics_tab: bool
    system_metric_names: bool

    def missing(self) -> list[str]:
        """One sentence per feature this MLflow lacks (none missing: [])."""
        if not self.ui:
            return [MISSING_TEXT["ui"]] + ([] if self.system_metric_names
                                           else [MISSING_TEXT["system_metric_names"]])
        return [text for name, text in MISSING_TEXT.items() if not getattr(self, name)]


def detect(root: Path | None = None, version: str | None = None) -> MlflowFeatures | None:
    """The installed MLflow's features (`root`: its package folder, for tests)."""
    if root is None:
        try:
            spec = importlib.util.find_spec("mlflow")
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return None
        root = Path(list(spec.submodule_search_locations)[0])
        version = version or _version()
    build = root / "server" / "js" / "build"
    found = _scan(build / "static" / "js", UI_NEEDLES)
    monitor = root / "system_metrics" / "metrics" / "cpu_monitor.py"
    names = _read(monitor)
    return MlflowFeatures(
        version=version or "unknown",
        ui=(build / "index.html").is_file(),
        system_metric_names=all(name in names for name in SYSTEM_METRIC_NAMES),
        **{name: name in found for name in UI_NEEDLES},
    )


def _version() -> str:
    try:
        return importlib.metadata.version("mlflow")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _scan(folder: Path, needles: dict[str, bytes]) -> set[str]:
    """Names whose needle occurs in some file of `folder` (memory-mapped: the UI build is
    20-70 MB of JavaScript)."""
    found: set[str] = set()
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix == ".js")
    except OSError:
        return found
    for path in files:
        if len(found) == len(needles):
            break
        try:
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                found.update(name for name, needle in needles.items()
                             if name not in found and data.find(needle) != -1)
        except (OSError, ValueError):  # unreadable, or empty (mmap refuses length 0)
            continue
    return found
