#!/usr/bin/env bash
# `make demo`: the MindSpore data-parallel example as a full run (全量运行) on 2 CPU ranks,
# tracked in a local SQLite MLflow store, then the per-rank comparison and the MLflow link.
#
# The example is copied into a scratch folder laid out like the platform's CODE/: a full run
# cleans CODE/ first, and the repository must never be what it cleans.
# DEMO_DIR (default build/demo) holds CODE/ and the MLflow store, outside what is cleaned.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${DEMO_BIN:-$REPO/.venv/bin}"  # make test-compat runs it with .venv39/bin
DEMO_DIR="$(mkdir -p "${DEMO_DIR:-$REPO/build/demo}" && cd "${DEMO_DIR:-$REPO/build/demo}" && pwd)"
CODE="$DEMO_DIR/CODE"
NOTEBOOK=mindspore_digits_data_parallel.ipynb

rm -rf "$CODE"
mkdir -p "$CODE"
cp "$REPO/notebooks/$NOTEBOOK" "$REPO/notebooks/train_mindspore_digits.py" \
   "$REPO/notebooks/digits_common.py" "$REPO/notebooks/platform.toml" "$CODE/"

export PATH="$BIN:$PATH"
export MLFLOW_TRACKING_URI="sqlite:///$DEMO_DIR/mlflow.db"
# This machine is not the platform: no rank table, so the ranks are CPU processes of
# MindSpore's dynamic cluster. Variables the platform would set must not leak in from a shell.
unset RANK_TABLE_FILE RANK_START RANK_ID DEVICE_ID RANK_SIZE PLATFORM_RUN_MODE

cd "$CODE"
echo "== platform-run full $NOTEBOOK  (in $CODE, 2 CPU ranks)"
platform-run full "$NOTEBOOK" -p cpu_ranks 2

echo
echo "== platform-run compare --url  (every rank of the job, from the MLflow store)"
platform-run compare --url

# the result in one block at the very end, whatever scrolled by above
OUTPUT_NOTEBOOK="$(ls -t "$CODE"/runs/*.ipynb 2>/dev/null | head -n 1)"
echo
echo "== make demo: done"
echo "   the run's notebook, with every cell's output: $OUTPUT_NOTEBOOK"
echo "   the ranks side by side: the table above (platform-run compare)"
echo "   MLflow store: $MLFLOW_TRACKING_URI"
echo "   to browse it: cd $CODE && MLFLOW_TRACKING_URI=$MLFLOW_TRACKING_URI $BIN/platform-run ui"
echo "     then open http://127.0.0.1:5000 (the link above overlays the ranks' loss curves)"
