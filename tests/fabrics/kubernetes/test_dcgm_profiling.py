"""MIG and profiling on Kubernetes: a MIG workload on the double is judged by DCGM's profiling series
(DCGM_FI_PROF_GR_ENGINE_ACTIVE, which MIG instances report and DCGM_FI_DEV_GPU_UTIL does not), read through the
site's real Prometheus scraping a stand-in exporter; a whole GPU whose exporter has profiling off falls back to
DCGM_FI_DEV_GPU_UTIL, and a device with both counts once, by its profiling series."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import JobState
from fabrics.kubernetes import dcgm
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.fabrics.kubernetes.scraping import scraping
from tests.fabrics.kubernetes.test_fabric import status_when
from tests.k8s_double import ApiDouble
from tests.k8s_double.pods import node

# As NVIDIA's dcgm-exporter prints them (Kubernetes pod mapping on); a MIG instance carries GPU_I_ID/GPU_I_PROFILE.
MIG = (
    'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",UUID="GPU-5fd4d5e6",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",'
    'GPU_I_PROFILE="1g.10gb",GPU_I_ID="{instance}",Hostname="gpu-node-1",container="main",namespace="{namespace}",'
    'pod="{pod}"}} {ratio}\n'
)
WHOLE_PROFILED = (
    'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="1",UUID="GPU-0c9b8a7d",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",'
    'Hostname="gpu-node-1",container="main",namespace="{namespace}",pod="{pod}"}} {ratio}\n'
    'DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-0c9b8a7d",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",'
    'Hostname="gpu-node-1",container="main",namespace="{namespace}",pod="{pod}"}} {percent}\n'
)
WHOLE_COARSE = (
    'DCGM_FI_DEV_GPU_UTIL{{gpu="2",UUID="GPU-9a8b7c6d",device="nvidia2",modelName="NVIDIA H100 80GB HBM3",'
    'Hostname="gpu-node-2",container="main",namespace="{namespace}",pod="{pod}"}} {percent}\n'
)


class Exporter:
    """Serves `text` (the test sets it) as the exporter's /metrics."""

    def __init__(self) -> None:
        self.text = "# nothing allocated\n"
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def double() -> Iterator[ApiDouble]:
    """A node whose A100s are cut into seven 1g.10gb MIG slices each, beside a node of whole H100s."""
    nodes = [node("gpu-node-1", gpus=7, gpu_resource="nvidia.com/mig-1g.10gb"), node("gpu-node-2", gpus=8)]
    with ApiDouble(namespaces=(NAMESPACE,), nodes=nodes) as api:
        yield api


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Exporter]]:
    """A real Prometheus scraping the stand-in exporter every second (its own label `namespace` renames the
    exporter's to exported_namespace, as a scrape through Kubernetes service discovery does)."""
    exporter = Exporter()
    try:
        with scraping(tmp_path, {"dcgm": (exporter.port, "gpu-operator")}) as url:
            yield url, exporter
    finally:
        exporter.server.shutdown()


def test_a_mig_workload_is_judged_by_profiling_and_a_gpu_without_it_by_the_coarse_metric(
    k8s_settings, double, prometheus
):
    url, exporter = prometheus
    sliced = connect(k8s_settings | {"prometheus_url": url, "gpu_flavor": "mig-1g.10gb"})
    whole = connect(k8s_settings | {"prometheus_url": url})
    jobs = [sliced.submit(spec("sleep 600")), whole.submit(spec("sleep 600")), whole.submit(spec("sleep 600"))]
    for name in jobs:
        status_when(whole, name, JobState.RUNNING)
    requested = [c["resources"]["limits"] for p in double.objects("pods", NAMESPACE)
                 if p["metadata"]["labels"].get("job-name") == jobs[0] for c in p["spec"]["containers"]]  # fmt: skip
    assert requested[0]["nvidia.com/mig-1g.10gb"] == "1"  # a MIG slice, not a whole GPU
    pod = {name: next(p["metadata"]["name"] for p in double.objects("pods", NAMESPACE)
                      if p["metadata"]["labels"].get("job-name") == name) for name in jobs}  # fmt: skip
    mig, profiled, coarse = (pod[name] for name in jobs)
    exporter.text = (
        MIG.format(instance="1", namespace=NAMESPACE, pod=mig, ratio="0.25")
        + MIG.format(instance="2", namespace=NAMESPACE, pod=mig, ratio="0.75")  # two slices of one GPU
        + WHOLE_PROFILED.format(namespace=NAMESPACE, pod=profiled, ratio="0.9", percent="40")
        + WHOLE_COARSE.format(namespace=NAMESPACE, pod=coarse, percent="30")
    )

    def measured() -> dict[str, Any] | None:
        statuses = whole.poll(jobs)
        return statuses if all(statuses[n].gpu_utilisation is not None for n in jobs) else None

    statuses = wait_until(measured, timeout=60, every=0.5)
    assert statuses[jobs[0]].gpu_utilisation == pytest.approx(50)  # the MIG slices: 25 % and 75 %
    assert statuses[jobs[1]].gpu_utilisation == pytest.approx(90)  # profiling wins over the coarse 40 %
    assert statuses[jobs[2]].gpu_utilisation == pytest.approx(30)  # profiling off: the fallback


def test_the_query_asks_for_both_series_under_either_namespace_label():
    query = dcgm.query_for("team-a")
    assert query.count('__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_GPU_UTIL"') == 2
    assert 'exported_namespace="team-a"' in query
