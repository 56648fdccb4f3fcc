#!/usr/bin/env bash
# Print the path of a working Python X.Y interpreter (for `make test-compat`, `make
# test-compat37`), or say how to get one and fail. Looks at pythonX.Y on PATH (pyenv's shim answers only when that version
# is selected), then pyenv's versions folder.
#   bash scripts/find-python.sh 3.9
set -euo pipefail
WANT="$1"
candidates=("python$WANT")
for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$WANT".*/bin; do
  candidates+=("$dir/python$WANT")
done
for py in "${candidates[@]}"; do
  if "$py" -c "import sys, venv; assert '%d.%d' % sys.version_info[:2] == '$WANT'" >/dev/null 2>&1; then
    command -v "$py"
    exit 0
  fi
done
echo "no Python $WANT found: install one (e.g. 'pyenv install $WANT', or Debian/Ubuntu's" \
     "python$WANT and python$WANT-venv) or pass PYTHON${WANT//./}=/path/to/python$WANT" >&2
exit 1
