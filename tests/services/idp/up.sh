#!/usr/bin/env bash
# The test OpenID Connect provider (tests/idp, panva's oidc-provider on Node) on 127.0.0.1:9000:
# `npm ci` when its packages are missing or older than the lock file, start it, wait for discovery.
# Shared like the test cluster: every test run (run.sh, by its PID) holds it while it lives, and the last one
# to let go stops it (down.sh), so two `make test` side by side never pull it from under each other.
set -euo pipefail
idp="$(cd "$(dirname "$0")/../../idp" && pwd)"
port="${GRIDLANE_TEST_IDP_PORT:-9000}"
url="http://127.0.0.1:$port/.well-known/openid-configuration"
rundir="/run/gridlane-test-idp-$port"
holder="${GRIDLANE_IDP_HOLDER:-$PPID}"
answers() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$url" 2>/dev/null; }

install -d -m 0755 "$rundir" "$rundir/holders"
exec 9>"$rundir/lock"
flock 9
touch "$rundir/holders/$holder"
if answers; then
  echo "identity provider already answering at $url (shared with the run that started it)"
  exit 0
fi
if ! command -v node >/dev/null; then
  apt-get -o DPkg::Lock::Timeout=120 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends nodejs npm
fi
if [ ! -f "$idp/node_modules/.package-lock.json" ] || [ "$idp/package-lock.json" -nt "$idp/node_modules/.package-lock.json" ]; then
  (cd "$idp" && npm ci --no-audit --no-fund --loglevel=error)
fi
IDP_PORT="$port" nohup node "$idp/idp.mjs" >"$rundir/idp.log" 2>&1 </dev/null 9>&- &
echo $! >"$rundir/idp.pid"
for _ in $(seq 150); do answers && break; sleep 0.1; done
if ! answers; then
  cat "$rundir/idp.log" >&2
  echo "the test identity provider did not answer at $url" >&2
  exit 1
fi
echo "identity provider at http://127.0.0.1:$port"
