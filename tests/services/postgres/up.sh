#!/usr/bin/env bash
# PostgreSQL on 127.0.0.1:5432 with trust auth (these machines run it already; start it if not).
set -euo pipefail
if ! command -v pg_ctlcluster >/dev/null; then
  apt-get -o DPkg::Lock::Timeout=120 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends postgresql
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  touch "$GRIDLANE_TEST_STATE/postgres.started-by-us"
  for _ in $(seq 100); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi
pg_isready -h 127.0.0.1 -p 5432
