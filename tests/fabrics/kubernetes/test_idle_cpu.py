"""The seed's idle rule on Kubernetes: GPUs *and* CPUs under their thresholds. A real Prometheus scrapes a stand-in
DCGM exporter and a stand-in kubelet's cAdvisor for the pods of the double's Jobs; the fabric's readings are kept
as the worker's sync keeps them (portal.usage.samples.from_fabric, at times the test gives), and the idle action
(portal.worker.gpu_idle) judges them: a job whose GPUs wait while its CPUs work is not warned, one idle in both
is, and a CPU-only job is judged on its CPUs alone (its efficiency windows)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import JobState, Resources
from portal.queues.models import Queue
from portal.usage import efficiency, samples
from portal.usage.rollup import idle_window
from portal.worker import gpu_idle
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.fabrics.kubernetes.scraping import scraping
from tests.fabrics.kubernetes.test_cadvisor import Kubelet
from tests.fabrics.kubernetes.test_dcgm import Exporter
from tests.fabrics.kubernetes.test_fabric import status_when

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
HELD = timedelta(hours=3)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Exporter, Kubelet]]:
    """A real Prometheus scraping both stand-ins every second, renaming their `namespace` labels to
    exported_namespace as a scrape through Kubernetes service discovery does."""
    exporter, kubelet = Exporter(), Kubelet()
    try:
        with scraping(
            tmp_path, {"dcgm": (exporter.port, "gpu-operator"), "cadvisor": (kubelet.port, "kube-system")}
        ) as url:
            yield url, exporter, kubelet
    finally:
        exporter.server.shutdown()
        kubelet.server.shutdown()


def running(submit: Any, user: Any, name: str, gpus: float, job: str) -> Workload:
    w = submit(user, name=name, gpus=gpus)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, started_at=T0 - HELD, external_id=job)
    return Workload.objects.get(pk=w.pk)


def warned(w: Workload) -> list[str]:
    return list(WorkloadEvent.objects.filter(workload=w, reason__contains="idle").values_list("reason", flat=True))


def test_idle_is_gpus_and_cpus_through_prometheus_and_a_cpu_only_job_is_judged_on_its_cpus(
    alice, submit, k8s_settings, double, prometheus
):
    url, exporter, kubelet = prometheus
    Queue.objects.filter(slug="train").update(gpu_idle_action="warn")
    fabric = connect(k8s_settings | {"prometheus_url": url})
    gpus, no_gpus = spec().per_node, Resources(0, 2000, 4096)  # each pod requests 2 CPUs, and 1 GPU or none
    names = {
        "preprocessing": fabric.submit(spec("sleep 600", per_node=gpus)),  # GPUs wait while its CPUs work: not idle
        "forgotten": fabric.submit(spec("sleep 600", per_node=gpus)),  # idle in both: idle
        "cpu-idle": fabric.submit(spec("sleep 600", per_node=no_gpus)),
        "cpu-busy": fabric.submit(spec("sleep 600", per_node=no_gpus)),
    }
    assert len(set(names.values())) == 4
    for job in names.values():
        status_when(fabric, job, JobState.RUNNING)
    pod = {name: next(p["metadata"]["name"] for p in double.objects("pods", NAMESPACE)
                      if p["metadata"]["labels"].get("job-name") == job) for name, job in names.items()}  # fmt: skip
    exporter.pods = {pod["preprocessing"]: (3, 3), pod["forgotten"]: (3, 3)}
    kubelet.pods = {pod["preprocessing"]: 1.5, pod["forgotten"]: 0.04, pod["cpu-idle"]: 0.04, pod["cpu-busy"]: 1.8}

    def read() -> dict[str, Any] | None:
        statuses = fabric.poll(list(names.values()))
        known = all(statuses[job].cpu_utilisation is not None for job in names.values())
        return statuses if known and statuses[names["forgotten"]].gpu_utilisation is not None else None

    polled = wait_until(read, timeout=60, every=0.5)
    statuses = {name: polled[job] for name, job in names.items()}
    assert statuses["preprocessing"].cpu_utilisation == pytest.approx(75, abs=1)  # 1.5 of 2 cores
    assert statuses["forgotten"].cpu_utilisation == pytest.approx(2, abs=1)
    assert statuses["cpu-idle"].gpu_utilisation is None  # no DCGM series: no GPU data
    assert statuses["cpu-busy"].gpu_utilisation is None

    workloads = {name: running(submit, alice, name, 0 if name.startswith("cpu") else 1, job)
                 for name, job in names.items()}  # fmt: skip
    for minutes in range(0, int(HELD.total_seconds() // 60), 5):  # sync's readings, every 5 min of the 3 h held
        for name, w in workloads.items():
            s = statuses[name]
            assert samples.from_fabric(w, s.gpu_utilisation, T0 - HELD + timedelta(minutes=minutes), s.cpu_utilisation)

    assert gpu_idle.step(T0) == {"warn": 1}
    assert warned(workloads["forgotten"]) == ["GPUs idle: 3 % utilisation, below 80 % for 180 min"]
    assert warned(workloads["preprocessing"]) == []  # its GPUs read 3 %, but its CPUs worked
    assert all(not warned(workloads[name]) for name in ("cpu-idle", "cpu-busy"))  # no GPUs: not the GPU action's

    window = idle_window()
    judged = {name: {win.idle for win in efficiency.efficiency(Workload.objects.get(pk=w.pk), T0, window).windows
                     if win.cpu_utilisation is not None} for name, w in workloads.items()}  # fmt: skip
    assert judged == {"preprocessing": {False}, "forgotten": {True}, "cpu-idle": {True}, "cpu-busy": {False}}
