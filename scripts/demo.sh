#!/usr/bin/env bash
# The main job on the embedded default: CPU MindSpore, local SQLite MLflow.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=.venv/bin/platform-run
$RUN ranktable check tests/data/ranktables/hccl_8p_01234567_10.0.0.1.json
$RUN env
