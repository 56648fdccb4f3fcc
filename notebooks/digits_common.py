"""What both digits examples share: the data split, the parameter digest and the rank summary.

The training scripts import this module from their own folder (Python puts a script's folder
first on sys.path), so it works whatever the launcher's working directory is.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import numpy as np

SUMMARY_PREFIX = "rank_summary "  # the line a test or a human greps for in a rank's log


def training_arguments(description: str) -> argparse.ArgumentParser:
    """The options both scripts take; the notebooks' parameters cells use the same names."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--sample-size", type=int, default=0,
                        help="use the first N samples of digits (0 = all 1797)")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out-dir", default="outputs",
                        help="checkpoint and one summary JSON per rank go here")
    return parser


def tracker_or_none():
    """The plugin's per-rank tracker (MLflow or the platform's wflogger), or None where
    platform_plugin is not installed: the scripts also run under plain torchrun/msrun."""
    try:
        from platform_plugin.tracking import get_tracker
    except ImportError:
        return None
    return get_tracker()


def log_hyperparameters(args: argparse.Namespace) -> None:
    tracker = tracker_or_none()
    if tracker is not None:
        tracker.log_params({k: v for k, v in vars(args).items() if k != "out_dir"})


def load_digits_split(sample_size: int, seed: int, test_fraction: float = 0.2):
    """sklearn's 8x8 digits (bundled with scikit-learn, no download), scaled to [0, 1].

    The split is seeded, so every rank sees the same train/test partition; each rank then
    takes its own shard of the training part.
    """
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    if sample_size:
        features, labels = features[:sample_size], labels[:sample_size]
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = max(1, int(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    features = (features / 16.0).astype(np.float32)
    labels = labels.astype(np.int32)
    return features[train], labels[train], features[test], labels[test]


def params_digest(named_arrays: dict[str, np.ndarray]) -> str:
    """sha256 over every parameter (sorted by name): equal digests = bit-identical models."""
    digest = hashlib.sha256()
    for name in sorted(named_arrays):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(named_arrays[name]).tobytes())
    return digest.hexdigest()


def write_rank_summary(out_dir: str | os.PathLike, rank: int, summary: dict) -> Path:
    """One JSON per rank, and the same record as one log line, so ranks can be compared."""
    path = Path(out_dir) / f"rank_{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True))
    print(SUMMARY_PREFIX + json.dumps(summary, sort_keys=True), flush=True)
    return path
