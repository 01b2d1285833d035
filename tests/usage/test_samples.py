"""GPU samples from a job's sampler: nvidia-smi's output read strictly, and POST /api/v1/workloads/<id>/samples/
with the workload's secret: kept while it runs, refused for anyone else, and at most one per interval."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from fabrics.sampler import SAMPLE_BATCH_ENV, SAMPLE_SECONDS_ENV, SAMPLES_URL_ENV, Reading, parse
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.usage import samples
from portal.usage.models import UsageGpuSample, UsageSample, UsageTurn
from portal.worker import samplers
from portal.worker.models import WorkerStats
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload
from portal.workloads.states import State

FIXTURES = Path(__file__).parent / "fixtures"
TWO_GPUS = (FIXTURES / "nvidia_smi_two_gpus.txt").read_text()
MIG = (FIXTURES / "nvidia_smi_mig.txt").read_text()
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def test_two_gpus_read_as_index_utilisation_and_memory():
    assert parse(TWO_GPUS) == [Reading(0, 97, 70312), Reading(1, 12, 1024)]


def test_a_mig_instance_has_memory_and_no_utilisation():
    assert parse(MIG) == [Reading(0, None, 4864), Reading(1, None, 4864)]


@pytest.mark.parametrize(
    "text",
    [
        "",  # no GPU at all
        "0, 101, 10\n",  # more than 100 %
        "0, -1, 10\n",
        "0, 50\n",  # a field missing
        "0, 50, 10, 7\n",  # one too many
        "0, 50.5, 10\n",  # utilisation is a whole percent
        "0, 50, 10\n0, 60, 10\n",  # one GPU twice
        "x, 50, 10\n",
        "[N/A], 50, 10\n",  # a GPU without an index
        "0, 50, 99999999999\n",  # more memory than any GPU has
        "0, \u0665\u0660, 10\n",  # digits, but not ASCII ones (Arabic-Indic 50)
        "".join(f"{i}, 1, 1\n" for i in range(65)),  # more GPUs than a node has
        "Failed to initialize NVML: Driver/library version mismatch\n",
    ],
)
def test_anything_but_the_query_s_output_is_refused(text):
    with pytest.raises(ValueError, match=r"."):  # every refusal says why
        parse(text)


@pytest.fixture
def hpc(cast: dict[str, Any]) -> Fabric:
    """A Slurm fabric (never reached here) behind a queue both teams may use."""
    fabric = Fabric.objects.create(name="hpc", kind="slurm", gpus_milli=8000, cpus_milli=32000, memory_mib=64000)
    queue = Queue.objects.create(slug="hpc", name="HPC", kinds=["notebook", "training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    return fabric


@pytest.fixture
def running(alice: Any, submit: Any, hpc: Fabric) -> Workload:
    """alice's two-GPU training run, running on the Slurm fabric."""
    workload = submit(alice, queue="hpc", kind="training", gpus=2)
    Workload.objects.filter(pk=workload.pk).update(state=State.RUNNING, fabric=hpc, external_id="42")
    workload.refresh_from_db()
    return workload


def post(workload_id: Any, secret: str | None, body: Any, **headers: Any) -> Any:
    if secret is not None:
        headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {secret}")
    return APIClient().post(f"/api/v1/workloads/{workload_id}/samples/", body, format="json", **headers)


def secret_of(w: Workload) -> str:
    return notebook_endpoint.secret(w.run_id)


def counted(outcome: str) -> float:
    return WorkerStats.objects.filter(name=f"usage_samples_{outcome}").values_list("value", flat=True).first() or 0


def test_a_sample_is_kept_with_the_average_utilisation_and_the_memory_in_use(running):
    with time_machine.travel(T0, tick=False):
        assert post(running.pk, secret_of(running), {"nvidia_smi": TWO_GPUS}).status_code == 204
    sample = UsageSample.objects.get(workload=running)
    assert (sample.at, sample.source, sample.gpus_milli) == (T0, UsageSample.Source.JOB, 2000)
    assert sample.gpu_utilisation == pytest.approx((97 + 12) / 2)
    assert sample.gpu_memory_mib == 70312 + 1024


def test_gpus_that_report_no_utilisation_give_no_data_not_zero(running):
    assert post(running.pk, secret_of(running), {"nvidia_smi": MIG}).status_code == 204
    sample = UsageSample.objects.get(workload=running)
    assert sample.gpu_utilisation is None
    assert sample.gpu_memory_mib == 2 * 4864


def test_a_wrong_secret_another_workload_s_secret_and_none_all_get_404(running, alice, submit, hpc):
    other = submit(alice, queue="hpc", kind="training", gpus=1)
    Workload.objects.filter(pk=other.pk).update(state=State.RUNNING, fabric=hpc, external_id="43")
    body = {"nvidia_smi": TWO_GPUS}
    assert post(running.pk, secret_of(other), body).status_code == 404
    assert post(running.pk, "0" * 64, body).status_code == 404
    assert post(running.pk, None, body).status_code == 404
    assert (
        post(running.pk, secret_of(running), body, HTTP_AUTHORIZATION=f"Basic {secret_of(running)}").status_code == 404
    )
    assert not UsageSample.objects.exists()
    assert counted("unknown") == 4


def test_the_job_of_an_earlier_attempt_cannot_speak_for_the_current_one(running):
    earlier = secret_of(running)
    Workload.objects.filter(pk=running.pk).update(attempt=1)  # preempted and started again
    assert post(running.pk, earlier, {"nvidia_smi": TWO_GPUS}).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"nvidia_smi": "0, 250, 10\n"},
        {"nvidia_smi": 97},
        {"nvidia_smi": TWO_GPUS, "extra": 1},
        {},
        ["0, 50, 10"],
        "0, 50, 10",
    ],
)
def test_garbage_is_refused_with_400_and_counted_and_nothing_is_kept(running, body):
    answer = post(running.pk, secret_of(running), body)
    assert answer.status_code == 400
    assert "errors" in answer.json()
    assert not UsageSample.objects.exists()
    assert counted("rejected") == 1


def test_a_body_past_256_kib_is_refused_before_it_is_read(running):
    answer = post(running.pk, secret_of(running), {"nvidia_smi": "0, 1, 1\n" * 40_000})
    assert answer.status_code == 413
    assert not UsageSample.objects.exists()


@pytest.mark.parametrize("state", [State.PENDING, State.ADMITTED, State.SUCCEEDED, State.CANCELLED, State.FAILED])
def test_only_a_workload_that_starts_or_runs_takes_samples(running, state):
    Workload.objects.filter(pk=running.pk).update(state=state)
    assert post(running.pk, secret_of(running), {"nvidia_smi": TWO_GPUS}).status_code == 409
    assert not UsageSample.objects.exists()
    assert counted("refused") == 1


def test_a_flood_gets_429_with_retry_after_and_one_sample_per_interval(running, settings):
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 10
    body = {"nvidia_smi": TWO_GPUS}
    with time_machine.travel(T0, tick=False) as clock:
        assert post(running.pk, secret_of(running), body).status_code == 204
        answers = [post(running.pk, secret_of(running), body) for _ in range(20)]
        assert {a.status_code for a in answers} == {429}
        assert answers[0]["Retry-After"] == "10"
        clock.shift(timedelta(seconds=4))
        assert post(running.pk, secret_of(running), body)["Retry-After"] == "6"
        clock.shift(timedelta(seconds=6))
        assert post(running.pk, secret_of(running), body).status_code == 204
    assert list(UsageSample.objects.order_by("at").values_list("at", flat=True)) == [T0, T0 + timedelta(seconds=10)]
    assert counted("limited") == 21


def test_the_portal_s_own_allocation_samples_do_not_hold_a_job_s_sample_back(running):
    UsageSample.objects.create(workload=running, at=T0, gpus_milli=2000)  # the rollup's, no utilisation
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        assert post(running.pk, secret_of(running), {"nvidia_smi": TWO_GPUS}).status_code == 204


def test_metrics_count_refused_samples_by_why(running, client):
    post(running.pk, secret_of(running), {"nvidia_smi": TWO_GPUS})
    post(running.pk, secret_of(running), {"nvidia_smi": "nonsense"})
    text = client.get("/metrics").content.decode()
    assert 'gridlane_usage_samples_total{outcome="rejected"} 1.0' in text
    assert 'gridlane_usage_samples_total{outcome="limited"} 0.0' in text


def test_a_job_on_slurm_gets_the_samples_url_the_interval_and_its_secret(running, settings):
    settings.GRIDLANE_PUBLIC_URL = "https://gridlane.example.org"
    settings.GRIDLANE_SAMPLE_SECONDS = 30.0
    settings.GRIDLANE_SAMPLE_BATCH = 10
    assert samples.job_env(running) == {
        SAMPLES_URL_ENV: f"https://gridlane.example.org/api/v1/workloads/{running.pk}/samples/",
        SAMPLE_SECONDS_ENV: "30",
        SAMPLE_BATCH_ENV: "10",
        ENDPOINT_SECRET_ENV: secret_of(running),
    }


def test_a_native_script_is_sampled_from_outside_and_an_unplaced_workload_and_an_agent_s_get_no_sampler(
    running, alice, submit, hpc, settings
):
    settings.GRIDLANE_PUBLIC_URL = "https://gridlane.example.org"
    Workload.objects.filter(pk=running.pk).update(script="#!/bin/bash\n#SBATCH --gres=gpu:1\ntrue\n", started_at=T0)
    running.refresh_from_db()
    assert samples.job_env(running) == {}  # nothing in the user's own script, byte for byte
    assert [w.pk for w in samplers.due()] == [running.pk]  # its sampler starts inside the job once it runs
    assert samples.native_env(running)[SAMPLES_URL_ENV].endswith(f"/api/v1/workloads/{running.pk}/samples/")
    assert ENDPOINT_SECRET_ENV not in samples.native_env(running)  # the secret goes on the step's stdin
    pending = submit(alice, queue="hpc", kind="training")
    assert samples.job_env(pending) == {}
    hpc.kind = "agent"
    hpc.save()
    Workload.objects.filter(pk=pending.pk).update(fabric=hpc)
    pending.refresh_from_db()
    assert samples.job_env(pending) == {}  # agents report their own


def test_the_openapi_schema_names_the_samples_endpoint(client):
    schema = json.loads(client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    assert set(schema["paths"]["/api/v1/workloads/{id}/samples/"]) == {"post"}


def test_an_accepted_sample_costs_five_queries(running, django_assert_num_queries):
    # the workload and its secret; the node's turn; take it (state and interval); the sample; its GPUs
    with django_assert_num_queries(5):
        assert post(running.pk, secret_of(running), {"nvidia_smi": TWO_GPUS}).status_code == 204


def test_a_post_that_names_its_node_on_its_url_costs_four(running, django_assert_num_queries):
    readings = [{"age": age, "node": "n1", "nvidia_smi": TWO_GPUS} for age in range(270, -1, -30)]
    url = f"/api/v1/workloads/{running.pk}/samples/?node=n1"
    headers: dict[str, Any] = {"HTTP_AUTHORIZATION": f"Bearer {secret_of(running)}"}
    with django_assert_num_queries(4):  # the workload, its secret and the node's turn; take it; samples; GPUs
        assert APIClient().post(url, {"readings": readings}, format="json", **headers).status_code == 204
    with time_machine.travel(timedelta(minutes=1)), django_assert_num_queries(4):
        again = [{"age": 0, "node": "n1", "nvidia_smi": TWO_GPUS}]
        assert APIClient().post(url, {"readings": again}, format="json", **headers).status_code == 204
    assert UsageSample.objects.filter(workload=running, node="n1").count() == 11


def test_a_batch_of_readings_costs_five_queries_too(running, django_assert_num_queries):
    readings = [{"age": age, "nvidia_smi": TWO_GPUS} for age in range(270, -1, -30)]
    with django_assert_num_queries(5):
        assert post(running.pk, secret_of(running), {"readings": readings}).status_code == 204
    assert UsageSample.objects.filter(workload=running).count() == 10


def test_a_batch_is_dated_by_the_portal_s_clock_less_each_reading_s_age(running, settings):
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 10
    Workload.objects.filter(pk=running.pk).update(admitted_at=T0 - timedelta(hours=1))
    readings = [
        {"age": 60, "nvidia_smi": "0, 10, 100\n"},
        {"age": 0, "nvidia_smi": "0, 90, 100\n"},  # in any order
        {"age": 30, "nvidia_smi": "0, 50, 100\n"},
        {"age": 25, "nvidia_smi": "0, 55, 100\n"},  # 5 s after the one before: under the interval, dropped
    ]
    with time_machine.travel(T0, tick=False):
        assert post(running.pk, secret_of(running), {"readings": readings}).status_code == 204
    kept = list(UsageSample.objects.filter(workload=running).order_by("at").values_list("at", "gpu_utilisation"))
    assert kept == [(T0 - timedelta(seconds=60), 10.0), (T0 - timedelta(seconds=30), 50.0), (T0, 90.0)]
    assert UsageTurn.objects.get(workload=running, node="").last_at == T0


def test_a_reading_older_than_the_rollups_look_back_or_than_the_admission_is_not_kept(running, settings):
    from portal.usage import rollup

    settings.GRIDLANE_SAMPLE_SECONDS, settings.GRIDLANE_SAMPLE_BATCH = 30.0, 10
    assert samples.max_age() == timedelta(minutes=10)
    assert rollup.look_back() >= samples.max_age() + timedelta(seconds=settings.GRIDLANE_ROLLUP_SECONDS)
    Workload.objects.filter(pk=running.pk).update(admitted_at=T0 - timedelta(minutes=5))
    readings = [{"age": 700, "nvidia_smi": TWO_GPUS}, {"age": 400, "nvidia_smi": TWO_GPUS}]
    with time_machine.travel(T0, tick=False):
        assert post(running.pk, secret_of(running), {"readings": readings}).status_code == 204
        assert not UsageSample.objects.exists()  # one before the admission, one too old: read, and dropped
        answer = post(running.pk, secret_of(running), {"readings": [{"age": 100, "nvidia_smi": TWO_GPUS}]})
    assert answer.status_code == 204
    assert list(UsageSample.objects.values_list("at", flat=True)) == [T0 - timedelta(seconds=100)]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"readings": [{"age": 0, "nvidia_smi": TWO_GPUS}, {"age": -1, "nvidia_smi": TWO_GPUS}]}, {"1": ["age"]}),
        ({"readings": [{"age": 1.5, "nvidia_smi": TWO_GPUS}]}, {"0": ["age"]}),
        ({"readings": [{"age": True, "nvidia_smi": TWO_GPUS}]}, {"0": ["age"]}),
        ({"readings": [{"age": 0, "nvidia_smi": "0, 101, 1"}]}, {"0": ["nvidia_smi"]}),
        ({"readings": [{"age": 0, "nvidia_smi": TWO_GPUS, "gpu": 1}]}, {"0": ["gpu"]}),
        ({"readings": [{"age": 0, "nvidia_smi": TWO_GPUS}, "x"]}, {"1": ["detail"]}),
    ],
)
def test_a_wrong_reading_in_a_batch_is_named_by_its_index_and_nothing_of_the_batch_is_kept(running, body, where):
    answer = post(running.pk, secret_of(running), body)
    assert answer.status_code == 400
    errors = answer.json()["errors"]["readings"]
    assert {index: sorted(fields) for index, fields in errors.items()} == where
    assert not UsageSample.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"readings": []},
        {"readings": [{"age": 0, "nvidia_smi": "0, 1, 1"}] * 121},
        {"readings": {"age": 0}},
        {"nvidia_smi": TWO_GPUS, "readings": [{"age": 0, "nvidia_smi": TWO_GPUS}]},
    ],
)
def test_a_batch_that_is_empty_too_long_or_mixed_with_a_single_reading_is_refused(running, body):
    assert post(running.pk, secret_of(running), body).status_code == 400
    assert not UsageSample.objects.exists()


def test_two_reports_racing_for_one_node_s_turn_keep_one_and_tell_the_other_to_wait(running, monkeypatch):
    seen = samples.sampled_by(running.pk, f"Bearer {secret_of(running)}")
    assert seen is not None
    take = samples._take_turn

    def raced(w: Any, node: str, turn: Any, last: Any, cpu: Any = None) -> bool:
        assert take(w, node, turn, last - timedelta(seconds=1))  # another report of the node takes it first
        return take(w, node, turn, last, cpu)

    monkeypatch.setattr(samples, "_take_turn", raced)
    for turn_before in (None, T0 - timedelta(minutes=5)):  # the node's first reading, and a later one
        if turn_before is not None:
            UsageTurn.objects.filter(workload=running, node="n1").update(last_at=turn_before)
        with pytest.raises(samples.TooSoon):
            samples.do_sample(seen, [samples.Taken(0, parse(TWO_GPUS), "n1")], T0)
    assert not UsageSample.objects.exists()
    monkeypatch.undo()
    assert samples.do_sample(seen, [samples.Taken(0, parse(TWO_GPUS), "n2")], T0) == 1  # another node: its own turn


def test_each_node_of_a_job_has_its_own_turn_and_its_gpus_are_kept_one_by_one(running, settings):
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 10
    eight = "".join(f"{i}, {u}, 2048\n" for i, u in enumerate([100, 95, 0, 0, 3, 0, 0, 1]))
    with time_machine.travel(T0, tick=False):
        for node in ("gpu-a", "gpu-b"):  # read at the same moment: neither crowds the other out
            answer = post(running.pk, secret_of(running), {"readings": [{"age": 0, "node": node, "nvidia_smi": eight}]})
            assert answer.status_code == 204
        again = post(running.pk, secret_of(running), {"node": "gpu-a", "nvidia_smi": eight})
    assert again.status_code == 429  # the same node within the interval
    rows = UsageSample.objects.filter(workload=running).order_by("node")
    assert [(r.node, r.gpus_read, r.gpus_idle) for r in rows] == [("gpu-a", 8, 6), ("gpu-b", 8, 6)]  # 8 held, 2 used
    gpus = UsageGpuSample.objects.filter(workload=running, node="gpu-b").order_by("gpu")
    assert [(g.gpu, g.utilisation, g.memory_mib, g.at) for g in gpus][:3] == [
        (0, 100.0, 2048, T0), (1, 95.0, 2048, T0), (2, 0.0, 2048, T0),
    ]  # fmt: skip
    assert UsageGpuSample.objects.filter(workload=running).count() == 16


def test_a_mig_instance_without_utilisation_counts_neither_idle_nor_read(running):
    assert post(running.pk, secret_of(running), {"node": "mig-node", "nvidia_smi": MIG}).status_code == 204
    sample = UsageSample.objects.get(workload=running)
    assert (sample.gpus_read, sample.gpus_idle, sample.gpu_utilisation) == (None, None, None)  # unknown, never idle


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"node": "a b", "nvidia_smi": TWO_GPUS}, "node"),
        ({"node": 7, "nvidia_smi": TWO_GPUS}, "node"),
        ({"node": "x" * 65, "nvidia_smi": TWO_GPUS}, "node"),
        ({"readings": [{"age": 0, "node": "a", "nvidia_smi": TWO_GPUS}, {"age": 9, "node": "b", "nvidia_smi": MIG}]},
         "node"),
    ],
)  # fmt: skip
def test_a_node_that_is_no_host_name_or_two_nodes_in_one_post_are_refused(running, body, field):
    answer = post(running.pk, secret_of(running), body)
    assert answer.status_code == 400
    assert field in answer.json()["errors"]
    assert not UsageSample.objects.exists()


def test_a_fabrics_own_measure_is_kept_by_sync_once_per_interval_and_never_for_work_not_running(running, settings):
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    from fabrics.base import JobState, JobStatus
    from portal.worker import sync

    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 30
    measured = JobStatus(JobState.RUNNING, host="gpu-node-1", gpu_utilisation=42.5)  # Kubernetes' poll, with DCGM
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        sync._follow(running.fabric, running, measured)
        sync._follow(running.fabric, running, measured)  # the next cycle: not its turn yet
    with time_machine.travel(now + timedelta(seconds=31), tick=False):
        sync._follow(running.fabric, running, replace(measured, gpu_utilisation=None))  # no data: nothing kept
        sync._follow(running.fabric, running, replace(measured, gpu_utilisation=7.0))
    kept = list(UsageSample.objects.filter(workload=running, source=UsageSample.Source.FABRIC).order_by("at")
                .values_list("gpu_utilisation", "gpus_milli"))  # fmt: skip
    assert kept == [(42.5, running.gpus_milli * running.nodes), (7.0, running.gpus_milli * running.nodes)]


def test_the_job_s_cpu_time_on_a_node_gives_its_cpu_utilisation_and_a_cpu_only_reading_is_kept(running, settings):
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 10
    Workload.objects.filter(pk=running.pk).update(cpus_milli=4000, admitted_at=T0 - timedelta(hours=1))
    readings = [
        {"age": 60, "node": "n1", "nvidia_smi": TWO_GPUS, "cpu_seconds": 1000.0},
        {"age": 30, "node": "n1", "nvidia_smi": TWO_GPUS, "cpu_seconds": 1060.0},  # 60 s of CPU in 30 s of 4 CPUs
        {"age": 0, "node": "n1", "cpu_seconds": 1180},  # no GPU in this one: its CPUs only, all four busy
    ]
    with time_machine.travel(T0, tick=False):
        assert post(running.pk, secret_of(running), {"readings": readings}).status_code == 204
        later = [{"age": 0, "node": "n1", "nvidia_smi": TWO_GPUS, "cpu_seconds": 1180.0}]
    with time_machine.travel(T0 + timedelta(seconds=30), tick=False):
        assert post(running.pk, secret_of(running), {"readings": later}).status_code == 204  # idle since
    kept = UsageSample.objects.filter(workload=running).order_by("at").values_list("cpu_utilisation", "gpus_read")
    assert list(kept) == [(None, 2), (50.0, 2), (100.0, None), (0.0, 2)]
    assert UsageTurn.objects.get(workload=running, node="n1").cpu_seconds == 1180.0


@pytest.mark.parametrize("cpu", [-1, True, "12", 1e13])
def test_cpu_seconds_that_are_no_time_are_refused(running, cpu):
    answer = post(running.pk, secret_of(running), {"readings": [{"age": 0, "cpu_seconds": cpu}]})
    assert answer.status_code == 400
    assert "cpu_seconds" in answer.json()["errors"]["readings"]["0"]
