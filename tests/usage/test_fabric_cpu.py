"""A fabric's own measure of a running job (Kubernetes: DCGM and cAdvisor through Prometheus, read by sync) is
kept with its CPUs as well as its GPUs, so that idle is GPUs *and* CPUs under their thresholds as on Slurm: a
job whose GPUs idle while its CPUs work is not idle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from portal.usage import rollup, samples
from portal.usage.models import UsageSample
from portal.workloads.models import Workload
from portal.workloads.states import State

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=30)


def running(submit, user, name):
    w = submit(user, name=name, gpus=1.0)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, started_at=T0 - timedelta(hours=1))
    return Workload.objects.get(pk=w.pk)


def test_the_fabric_s_cpu_reading_is_kept_and_a_job_whose_cpus_work_is_not_idle(alice, submit):
    preprocessing = running(submit, alice, "cpu-bound-preprocessing")
    forgotten = running(submit, alice, "forgotten")
    at = T0 + timedelta(minutes=5)
    assert samples.from_fabric(preprocessing, 3.0, at, cpu=60.0)
    assert samples.from_fabric(forgotten, 3.0, at, cpu=2.0)
    kept = {s.workload_id: (s.gpu_utilisation, s.cpu_utilisation, s.source) for s in UsageSample.objects.all()}
    assert kept == {preprocessing.pk: (3.0, 60.0, "fabric"), forgotten.pk: (3.0, 2.0, "fabric")}
    averages, idle_shares = rollup.figures(T0, T0 + WINDOW, WINDOW)
    assert averages == {(str(preprocessing.pk), T0): 3.0, (str(forgotten.pk), T0): 3.0}
    assert idle_shares == {(str(preprocessing.pk), T0): 0.0}  # its CPUs worked: none of its GPU-hours idle
    # the forgotten job's GPUs (3 %) and CPUs (2 %) are both under their thresholds: idle, by its average


def test_a_cpu_reading_alone_is_kept_and_nothing_is_not(alice, submit):
    w = running(submit, alice, "no-dcgm")
    assert not samples.from_fabric(w, None, T0)  # neither: nothing to keep, its turn not taken
    assert samples.from_fabric(w, None, T0, cpu=250.0)
    assert list(UsageSample.objects.values_list("gpu_utilisation", "cpu_utilisation")) == [(None, 100.0)]
