#!/usr/bin/env bash
# Run a command with every test service up: tests/services/<name>/up.sh before, down.sh after (by PID).
# Each up.sh installs what its service needs when missing (Debian packages, npm), starts it, and waits
# until it answers; each down.sh stops only what its up.sh started. Services are brought up in name order.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GRIDLANE_TEST_STATE="${GRIDLANE_TEST_STATE:-$(cd "$here/../.." && pwd)/var/test-services}"
mkdir -p "$GRIDLANE_TEST_STATE"

started=()
down() {
  local rc=$?
  for ((i=${#started[@]}-1; i>=0; i--)); do
    bash "$here/${started[i]}/down.sh" || echo "warning: ${started[i]}/down.sh failed" >&2
  done
  exit $rc
}
trap down EXIT INT TERM

for dir in "$here"/*/; do
  name=$(basename "$dir")
  [ -f "$dir/up.sh" ] || continue
  echo "== test service: $name"
  bash "$dir/up.sh"
  started+=("$name")
done
"$@"
