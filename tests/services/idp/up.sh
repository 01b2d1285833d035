#!/usr/bin/env bash
# The test OpenID Connect provider (tests/idp, panva's oidc-provider on Node) on 127.0.0.1:9000:
# `npm ci` when its packages are missing or older than the lock file, start it, wait for discovery.
set -euo pipefail
idp="$(cd "$(dirname "$0")/../../idp" && pwd)"
port="${GRIDLANE_TEST_IDP_PORT:-9000}"
url="http://127.0.0.1:$port/.well-known/openid-configuration"
answers() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$url" 2>/dev/null; }

if answers; then
  echo "identity provider already answering at $url (left as it is)"
  exit 0
fi
if ! command -v node >/dev/null; then
  apt-get -o DPkg::Lock::Timeout=120 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends nodejs npm
fi
if [ ! -f "$idp/node_modules/.package-lock.json" ] || [ "$idp/package-lock.json" -nt "$idp/node_modules/.package-lock.json" ]; then
  (cd "$idp" && npm ci --no-audit --no-fund --loglevel=error)
fi
IDP_PORT="$port" nohup node "$idp/idp.mjs" >"$GRIDLANE_TEST_STATE/idp.log" 2>&1 </dev/null &
echo $! >"$GRIDLANE_TEST_STATE/idp.pid"
for _ in $(seq 150); do answers && break; sleep 0.1; done
if ! answers; then
  cat "$GRIDLANE_TEST_STATE/idp.log" >&2
  echo "the test identity provider did not answer at $url" >&2
  exit 1
fi
echo "identity provider at http://127.0.0.1:$port"
