#!/usr/bin/env bash
# Debian's nginx, for the front proxy in deploy/nginx/ (tests/deploy/test_nginx.py): each test starts its own
# nginx on free ports with a prefix of its own, in front of web processes it starts; here we only make sure the
# program (and openssl, for the test certificate) is there.
set -euo pipefail
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  apt-get -o DPkg::Lock::Timeout=120 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends nginx openssl
fi
/usr/sbin/nginx -v 2>&1
