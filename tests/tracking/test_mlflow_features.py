"""MLflow 3.1 (the newest on Python 3.9) and 3.17 differ in their UI: detected in the installed
UI build, said as WARN rows / lines, never a failure."""
from __future__ import annotations

import importlib.metadata

from platform_plugin.cli.doctor import mlflow_rows
from platform_plugin.tracking.server.mlflow_features import MISSING_TEXT, SYSTEM_METRIC_NAMES, detect

# what the locks install: constraints/py39.txt and constraints/py311.txt
KNOWN = {"3.1.4": {"experiment_kinds": False}, "3.17.2": {"experiment_kinds": True}}


def test_the_installed_mlflow_is_detected():
    features = detect()
    assert features.version == importlib.metadata.version("mlflow")
    assert features.ui and features.metric_page and features.system_metrics_tab
    assert features.system_metric_names
    for name, expected in KNOWN.get(features.version, {}).items():
        assert getattr(features, name) is expected, name
    rows = mlflow_rows()
    assert {row.status for row in rows} == ({"OK"} if not features.missing() else {"WARN"})
    assert all(features.version in row.detail for row in rows)


def fake_mlflow(root, bundle: bytes, monitor: str = ""):
    js = root / "server" / "js" / "build" / "static" / "js"
    js.mkdir(parents=True)
    (js.parent.parent / "index.html").write_text("<html></html>")
    (js / "main.abc.js").write_bytes(bundle)
    (js / "empty.js").write_bytes(b"")  # mmap refuses empty files: skipped
    metrics = root / "system_metrics" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "cpu_monitor.py").write_text(monitor)
    return root


def test_each_missing_feature_is_named(tmp_path):
    old = detect(fake_mlflow(tmp_path / "old", b'routes={"/metric/*":1}'), "3.0.0")
    assert old.missing() == [MISSING_TEXT[name] for name in ("experiment_kinds",
                                                            "system_metrics_tab",
                                                            "system_metric_names")]
    full = detect(fake_mlflow(tmp_path / "new", b'"/metric/*" System metrics '
                              b'kind="custom_model_development"', " ".join(SYSTEM_METRIC_NAMES)),
                  "3.99.0")
    assert full.missing() == []
    skinny = detect(tmp_path / "skinny", "3.5.0")  # no UI build at all
    assert skinny.missing() == [MISSING_TEXT["ui"], MISSING_TEXT["system_metric_names"]]
