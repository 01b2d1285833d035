"""GPU utilisation on Kubernetes: the fabric asks the site's real Prometheus (Debian's), which scrapes a stand-in
DCGM exporter serving captured exporter output for the pods of the double's Jobs. One query per sync however
many jobs run; a pod with no series, or a Prometheus that does not answer, is no data (None), never 0 or 100."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import JobState
from fabrics.kubernetes import dcgm
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.fabrics.kubernetes.scraping import scraping, serving
from tests.fabrics.kubernetes.test_fabric import status_when

# Captured from NVIDIA's dcgm-exporter (its Kubernetes pod mapping on), with the pod and values filled in here.
EXPORTER = (Path(__file__).parent / "fixtures" / "dcgm-exporter.txt").read_text()


class Exporter:
    """Serves the captured output for the pods it is told about, with the utilisation the test sets."""

    def __init__(self) -> None:
        self.pods: dict[str, tuple[float, float]] = {}
        self.server = serving(self.body)
        self.port = self.server.server_address[1]

    def body(self) -> bytes:
        lines = []
        for pod, (util0, util1) in self.pods.items():
            text = EXPORTER.replace("{namespace}", NAMESPACE).replace("{pod}", pod)
            lines.append(text.replace("{util0}", f"{util0:g}").replace("{util1}", f"{util1:g}"))
        return "\n".join(lines).encode() or b"# nothing allocated\n"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Exporter]]:
    """A real Prometheus scraping the stand-in every second; its own target label `namespace` makes it rename
    the exporter's to exported_namespace, as a scrape through Kubernetes service discovery does."""
    exporter = Exporter()
    try:
        with scraping(tmp_path, {"dcgm": (exporter.port, "gpu-operator")}) as url:
            yield url, exporter
    finally:
        exporter.server.shutdown()


def queries_served(url: str) -> int:
    """How many instant queries this Prometheus has answered, by its own counter on its /metrics."""
    # prometheus_http_requests_total{code="200",handler="/api/v1/query"} 7
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        lines = answer.read().decode().splitlines()
    counted = [line for line in lines if line.startswith("prometheus_http_requests_total{")
               and 'handler="/api/v1/query"' in line]  # fmt: skip
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in counted)


def test_running_jobs_get_their_gpus_utilisation_from_one_query_per_sync(k8s_settings, double, prometheus):
    url, exporter = prometheus
    fabric = connect(k8s_settings | {"prometheus_url": url})
    jobs = [fabric.submit(spec("sleep 600", per_node=spec().per_node)) for _ in range(3)]
    for name in jobs:
        status_when(fabric, name, JobState.RUNNING)
    pods = {name: [p["metadata"]["name"] for p in double.objects("pods", NAMESPACE)
                   if p["metadata"]["labels"].get("job-name") == name] for name in jobs}  # fmt: skip
    exporter.pods = {pods[jobs[0]][0]: (90, 70), pods[jobs[1]][0]: (5, 15)}  # the third reports nothing

    def measured() -> dict[str, Any] | None:
        statuses = fabric.poll(jobs)
        return statuses if statuses[jobs[0]].gpu_utilisation is not None else None

    statuses = wait_until(measured, timeout=60, every=0.5)
    assert statuses[jobs[0]].gpu_utilisation == pytest.approx(80)
    assert statuses[jobs[1]].gpu_utilisation == pytest.approx(10)
    assert statuses[jobs[2]].gpu_utilisation is None  # no series: no data, not 0
    before = queries_served(url)
    fabric.poll(jobs)
    assert queries_served(url) - before == 1  # three running jobs, one query
    exporter.pods[pods[jobs[0]][0]] = (20, 20)  # its utilisation changes: the next samples say so
    wait_until(lambda: fabric.poll(jobs)[jobs[0]].gpu_utilisation == pytest.approx(20), timeout=60, every=0.5)


def test_a_prometheus_that_does_not_answer_in_time_leaves_no_data(k8s_settings, double):
    listener = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    try:
        fabric = connect(k8s_settings | {"prometheus_url": f"http://127.0.0.1:{listener.getsockname()[1]}",
                                         "request_timeout_s": 1})  # fmt: skip
        name = fabric.submit(spec("sleep 600"))
        status = status_when(fabric, name, JobState.RUNNING, timeout=30)
        assert status.gpu_utilisation is None
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("series", "want"),
    [
        ({"metric": {"pod": "p", "namespace": NAMESPACE}, "value": [1, "50"]}, {"p": 50.0}),
        (
            {
                "metric": {
                    "exported_pod": "p",
                    "exported_namespace": NAMESPACE,
                    "namespace": "gpu-operator",
                    "pod": "exporter-x",
                },
                "value": [1, "50"],
            },
            {"p": 50.0},
        ),
        ({"metric": {"pod": "p", "namespace": "other"}, "value": [1, "50"]}, {}),
        ({"metric": {"pod": "", "namespace": NAMESPACE}, "value": [1, "50"]}, {}),
        ({"metric": {"pod": "p", "namespace": NAMESPACE}, "value": [1, "NaN"]}, {}),
        ({"metric": {"pod": "p", "namespace": NAMESPACE}, "value": [1, "250"]}, {}),
        ({"metric": {"pod": "p", "namespace": NAMESPACE}, "value": [1, "x"]}, {}),
        ({"metric": {"pod": "p", "namespace": NAMESPACE}}, {}),
        ("garbage", {}),
    ],
)
def test_series_that_cannot_be_read_are_left_out(series, want):
    assert dcgm.by_pod([series], NAMESPACE) == want


def test_the_prometheus_url_must_be_http(k8s_settings):
    with pytest.raises(ValueError, match="prometheus_url"):
        connect(k8s_settings | {"prometheus_url": "file:///etc/passwd"})
