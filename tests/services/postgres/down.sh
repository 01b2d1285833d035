#!/usr/bin/env bash
# Stop PostgreSQL only if up.sh started it.
set -euo pipefail
marker="$GRIDLANE_TEST_STATE/postgres.started-by-us"
if [ -f "$marker" ]; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main stop || true
  rm -f "$marker"
fi
