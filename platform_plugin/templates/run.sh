#!/usr/bin/env bash
# run.sh — start distributed training on this server: one process per device of the rank table.
#
# The platform's usual launch script was a loop like this:
#
#   for ((i = 0; i < 8; i++)); do
#       export RANK_ID=$((RANK_START + i))
#       export DEVICE_ID=$i                      # wrong when the table lists devices 4-7
#       python train.py "$@" > train$i.log 2>&1 &
#   done
#   wait                                         # exits 0 even when a rank crashed
#
# It always "succeeds", leaves the other ranks hanging in HCCL for 30 minutes when one dies,
# and nobody sees the logs until the end. The line below replaces it: it reads the rank
# table (RANK_TABLE_FILE, RANK_START from the platform), starts one rank per device of this
# server with the right RANK_ID / DEVICE_ID / RANK_SIZE, prefixes every line with [rank N],
# writes platform_logs/<job>/rank_<N>.log, stops every rank at the first failure and exits
# non-zero with a table naming the rank that failed first.
#
# Without NPUs (a CPU/GPU machine: MindSpore's dynamic cluster) say how many ranks: NPROC=2.
# Usage: bash run.sh [train.py options...]      e.g. bash run.sh --epochs 10
set -euo pipefail
cd "$(dirname "$0")"
exec platform-run launch ${NPROC:+--nproc "$NPROC"} -- python train.py "$@"
