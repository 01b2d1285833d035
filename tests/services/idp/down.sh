#!/usr/bin/env bash
# Let go of the test identity provider; the last test run holding it stops it, by the PID up.sh recorded
# (if that is still it).
set -euo pipefail
port="${GRIDLANE_TEST_IDP_PORT:-9000}"
rundir="/run/gridlane-test-idp-$port"
holder="${GRIDLANE_IDP_HOLDER:-$PPID}"
[ -d "$rundir" ] || exit 0
exec 9>"$rundir/lock"
flock 9
rm -f "$rundir/holders/$holder"
for h in "$rundir"/holders/*; do
  [ -e "$h" ] || continue
  if kill -0 "$(basename "$h")" 2>/dev/null; then
    echo "identity provider: another test run still holds it; leaving it up"
    exit 0
  fi
  rm -f "$h"
done
pidfile="$rundir/idp.pid"
if [ -f "$pidfile" ]; then
  pid=$(cat "$pidfile")
  if grep -qs "idp.mjs" "/proc/$pid/cmdline"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$pidfile"
fi
