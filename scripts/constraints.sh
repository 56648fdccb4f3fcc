#!/usr/bin/env bash
# Write the exact versions a working venv holds as a pip constraints file, the lock that
# `make demo`, `make test` and `make test-compat` install with (`pip install -c FILE`).
#   bash scripts/constraints.sh .venv   constraints/py311.txt
#   bash scripts/constraints.sh .venv39 constraints/py39.txt
#   bash scripts/constraints.sh .venv37 constraints/py37.txt
# Refresh it after a dependency change, once the suite passes in that venv. The package's own
# metadata (pyproject.toml) keeps ranges; only this file pins.
set -euo pipefail
VENV="$1"
OUT="$2"
PY_VERSION="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
{
  echo "# Exact versions for Python $PY_VERSION on $(uname -m), written by scripts/constraints.sh"
  echo "# from a venv whose test suite passed. Used as: pip install -c $OUT ..."
  # the project itself (editable or not) is never a constraint
  "$VENV/bin/python" -m pip freeze --all --exclude-editable 2>/dev/null \
    | grep -v -i -E '^(platform-plugin|platform_plugin|pip|setuptools|wheel)( |=|@)' | LC_ALL=C sort -f
} > "$OUT"
echo "wrote $OUT ($(grep -c '==' "$OUT") pins)"
