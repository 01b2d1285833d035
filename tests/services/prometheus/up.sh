#!/usr/bin/env bash
# Debian's Prometheus, for the DCGM path of the Kubernetes fabric (tests/fabrics/kubernetes/test_dcgm.py): each
# test starts its own server on a free port, scraping a stand-in exporter it serves; here we only make sure the
# program is there (the packaged service, when the package starts one, is left alone).
set -euo pipefail
if [ ! -x /usr/bin/prometheus ]; then
  apt-get -o DPkg::Lock::Timeout=120 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends prometheus
fi
/usr/bin/prometheus --version 2>&1 | head -1
