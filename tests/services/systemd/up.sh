#!/usr/bin/env bash
# Debian's systemd, for `systemd-analyze verify` of deploy/systemd/ (tests/deploy/test_systemd.py): only the
# program is needed, nothing is started (the tests run it against a root folder of their own).
set -euo pipefail
if ! command -v systemd-analyze >/dev/null; then
  apt-get -o DPkg::Lock::Timeout=120 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends systemd
fi
systemd-analyze --version | head -n 1
