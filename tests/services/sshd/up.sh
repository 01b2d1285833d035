#!/usr/bin/env bash
# Debian's openssh-server, for the lease tests: each test's fixture starts its own key-only sshd on
# 127.0.0.1 and a free port (tests/agents/test_leases.py); here we only make sure the program is there.
set -euo pipefail
if [ ! -x /usr/sbin/sshd ]; then
  apt-get -o DPkg::Lock::Timeout=120 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends openssh-server
fi
mkdir -p /run/sshd 2>/dev/null || true
/usr/sbin/sshd -V 2>&1 | head -n 1
