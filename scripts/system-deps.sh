#!/usr/bin/env bash
# Debian packages the test suite needs: chromium (headless browser for the MLflow UI test) and
# PostgreSQL's server binaries (initdb, pg_ctl: `platform-run server` and its tests), and
# btrfs-progs (mkfs.btrfs: the lock test on a btrfs loop mount, whose /proc/locks device differs).
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 \
  || missing+=(postgresql-15)
command -v mkfs.btrfs >/dev/null 2>&1 || missing+=(btrfs-progs)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "installing Debian packages: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
