"""CPU utilisation on Kubernetes: the fabric asks the site's real Prometheus (Debian's), which scrapes a stand-in
kubelet serving cAdvisor's `container_cpu_usage_seconds_total` for the pods of the double's Jobs, in the same one
query per sync as the GPUs. Each counter grows at the cores the test sets, with explicit sample timestamps, so
the rate Prometheus computes between two scrapes is exact however late they come. Against the CPUs the pods
request: 0-100; a job with no series is no data (None), never 0."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import JobState
from fabrics.kubernetes import cadvisor, dcgm
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.fabrics.kubernetes.scraping import scraping, serving
from tests.fabrics.kubernetes.test_dcgm import queries_served
from tests.fabrics.kubernetes.test_fabric import status_when

CPU = dcgm.OTHER
T0 = 1_700_000_000.0  # the counters' zero; a sample at time t reads cores * (t - T0)

# As the kubelet's /metrics/cadvisor writes them: the pod-level cgroup (container ""), the pause container
# (POD) and the job's own container; only the last counts.
LINES = (
    'container_cpu_usage_seconds_total{{container="",cpu="total",id="/kubepods/pod{pod}",namespace="{ns}",'
    'pod="{pod}"}} {pod_total:.6f} {ms}\n'
    'container_cpu_usage_seconds_total{{container="POD",cpu="total",id="/kubepods/pod{pod}/pause",namespace="{ns}",'
    'pod="{pod}"}} {pause:.6f} {ms}\n'
    'container_cpu_usage_seconds_total{{container="main",cpu="total",id="/kubepods/pod{pod}/main",namespace="{ns}",'
    'pod="{pod}"}} {main:.6f} {ms}\n'
)


class Kubelet:
    """Serves cAdvisor's CPU counters for the pods it is told about, growing at the cores the test sets."""

    def __init__(self) -> None:
        self.pods: dict[str, float] = {}
        self.server = serving(self.body)
        self.port = self.server.server_address[1]

    def body(self) -> bytes:
        now = time.time()
        seconds = now - T0
        return ("# TYPE container_cpu_usage_seconds_total counter\n" + "".join(
            LINES.format(pod=pod, ns=NAMESPACE, main=cores * seconds, pause=0.001 * seconds,
                         pod_total=(cores + 0.001) * seconds, ms=int(now * 1000))
            for pod, cores in self.pods.items()
        )).encode()  # fmt: skip


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Kubelet]]:
    """A real Prometheus scraping the stand-in every second; its own target label `namespace` makes it rename
    the kubelet's to exported_namespace, as a scrape through Kubernetes service discovery does."""
    kubelet = Kubelet()
    try:
        with scraping(tmp_path, {"cadvisor": (kubelet.port, "kube-system")}) as url:
            yield url, kubelet
    finally:
        kubelet.server.shutdown()


def test_running_jobs_get_their_cpu_utilisation_against_their_request_in_the_same_query(
    k8s_settings, double, prometheus
):
    url, kubelet = prometheus
    fabric = connect(k8s_settings | {"prometheus_url": url})
    jobs = [fabric.submit(spec("sleep 600")) for _ in range(3)]  # each pod requests 2 CPUs
    for name in jobs:
        status_when(fabric, name, JobState.RUNNING)
    pods = {name: [p["metadata"]["name"] for p in double.objects("pods", NAMESPACE)
                   if p["metadata"]["labels"].get("job-name") == name] for name in jobs}  # fmt: skip
    kubelet.pods = {pods[jobs[0]][0]: 1.5, pods[jobs[1]][0]: 0.1}  # the third reports nothing

    def measured() -> dict[str, Any] | None:
        statuses = fabric.poll(jobs)
        return statuses if statuses[jobs[1]].cpu_utilisation is not None else None

    statuses = wait_until(measured, timeout=60, every=0.5)
    assert statuses[jobs[0]].cpu_utilisation == pytest.approx(75, abs=0.5)  # 1.5 of 2 cores
    assert statuses[jobs[1]].cpu_utilisation == pytest.approx(5, abs=0.5)  # under the 10 % threshold: idle CPUs
    assert statuses[jobs[2]].cpu_utilisation is None  # no series: no data, not 0
    assert all(s.gpu_utilisation is None for s in statuses.values())  # no DCGM here: no GPU data
    before = queries_served(url)
    fabric.poll(jobs)
    assert queries_served(url) - before == 1  # GPUs and CPUs of three running jobs, one query


POD = {"metadata": {"name": "p"}, "spec": {"containers": [
    {"name": "main", "resources": {"requests": {"cpu": "1500m"}}},
    {"name": "side", "resources": {"limits": {"cpu": "500m"}}},  # no request: its limit is its request
]}}  # fmt: skip


MAIN = {CPU: "cpu", "pod": "p", "namespace": NAMESPACE, "container": "main"}


@pytest.mark.parametrize(
    ("series", "want"),
    [
        ({"metric": MAIN, "value": [1, "0.5"]}, {"p": 0.5}),
        ({"metric": {CPU: "cpu", "exported_pod": "p", "exported_namespace": NAMESPACE, "exported_container": "main",
                     "namespace": "kube-system"}, "value": [1, "0.5"]}, {"p": 0.5}),
        ({"metric": MAIN | {"container": ""}, "value": [1, "0.5"]}, {}),  # the pod's own cgroup
        ({"metric": MAIN | {"container": "POD"}, "value": [1, "0.5"]}, {}),  # the pause container
        ({"metric": MAIN | {"namespace": "other"}, "value": [1, "0.5"]}, {}),
        ({"metric": MAIN | {CPU: ""}, "value": [1, "0.5"]}, {}),  # not marked: a DCGM series of the answer
        ({"metric": MAIN, "value": [1, "NaN"]}, {}),
        ({"metric": MAIN, "value": [1, "-1"]}, {}),
        ({"metric": MAIN, "value": [1, "x"]}, {}),
        ({"metric": MAIN}, {}),
        ("garbage", {}),
    ],
)  # fmt: skip
def test_series_that_are_not_a_container_s_cpu_are_left_out(series, want):
    assert cadvisor.by_pod([series], NAMESPACE) == want


def test_a_job_s_share_is_against_its_pods_requests_and_unknown_without_one():
    assert cadvisor.of_job({"p": 1.0}, [POD]) == pytest.approx(50)  # 1 of 2 CPUs
    assert cadvisor.of_job({"p": 9.0}, [POD]) == 100  # bursting past its request reads as full
    assert cadvisor.of_job({}, [POD]) is None
    assert cadvisor.of_job({"p": 1.0}, [{"metadata": {"name": "p"}, "spec": {"containers": [{}]}}]) is None
