#!/usr/bin/env bash
# Stop the test identity provider, only if up.sh started it (by the PID it recorded, if that is still it).
set -euo pipefail
pidfile="$GRIDLANE_TEST_STATE/idp.pid"
if [ -f "$pidfile" ]; then
  pid=$(cat "$pidfile")
  if grep -qs "idp.mjs" "/proc/$pid/cmdline"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$pidfile"
fi
