#!/usr/bin/env bash
# Headless Chromium for the browser tests: Debian's package (Playwright cannot download its own browser here).
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  apt-get -o DPkg::Lock::Timeout=120 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends chromium
fi
/usr/bin/chromium --version 2>/dev/null | tail -n 1
