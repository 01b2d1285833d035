"""A native PBS job on two nodes is read on both, GPU by GPU: each node's agent speaks for its own node (one of the
job's execution hosts), its readings are kept per node and per GPU as a sampler's are, a host the job does not
run on and an agent of a fabric the PBS fabric does not name are refused, and the node that has sent nothing is
named on the job's efficiency, with why."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gridlane_cli import stats
from portal.agents import native
from portal.queues.models import Fabric
from portal.usage.models import SamplerStart, UsageGpuSample, UsageGpuWindow, UsageSample, UsageTurn
from portal.usage.unread import unread
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.agents.test_api import bearer, other_agent  # noqa: F401 (a fixture)

JOB = "5150.pbs-server"
URL = "/api/v1/agent/pbs-jobs/usage/"
MISSING_8 = "no readings from GPU-8.cluster.example: no agent of fabric hosts with --pbs-jobs has sent any from it"


def gpus(*utilisations):
    return [{"index": i, "utilisation": u, "memory_mib": 1000 + i} for i, u in enumerate(utilisations)]


def reading(minutes_ago=1, **fields):
    return {"at": (timezone.now() - timedelta(minutes=minutes_ago)).isoformat(), "cpu_utilisation": 40.0} | fields


@pytest.fixture
def two_nodes(alice, submit, hosts):
    """A native PBS job holding 4 GPUs on each of gpu-7 and GPU-8.cluster.example (as PBS spells them), and an agent
    client of the fabric `hosts` that the PBS fabric names, registered on both and on gpu-9."""
    pbs = Fabric.objects.create(name="pbs", kind="pbs", gpus_milli=16000, cpus_milli=64000, memory_mib=128000,
                                settings={"agent_fabric": hosts["fabric"].name})  # fmt: skip
    w = submit(alice, name="native-two", gpus=4)
    Workload.objects.filter(pk=w.pk).update(
        fabric=pbs, state=State.RUNNING, external_id=JOB, host="gpu-7,GPU-8.cluster.example", nodes=2,
        started_at=timezone.now() - timedelta(hours=1), script="#PBS -l select=2:ngpus=4\n./train",
    )  # fmt: skip
    SamplerStart.objects.create(workload_id=w.pk, at=timezone.now(), reason="run Gridlane's agent on its nodes")
    client = bearer(hosts["token"])
    for name in ("gpu-7.cluster.example", "gpu-8", "gpu-9"):
        client.post("/api/v1/agent/register/", {"host": name, "queues": ["gpu-a"]}, format="json")
    return client, w


def test_each_node_s_agent_keeps_its_node_s_gpus_one_by_one(
    two_nodes, api_as, alice, client, settings, django_assert_max_num_queries
):
    agent, w = two_nodes
    seven = agent.post(URL, {"host": "gpu-7.cluster.example", "jobs": {JOB: [reading(gpus=gpus(95, 5, None, 90))]}},
                        format="json")  # fmt: skip
    assert seven.json() == {"recorded": 1, "unknown": []}
    assert SamplerStart.objects.get(workload_id=w.pk).started
    # the second node is not read yet: its efficiency says so, and why
    summary = api_as(alice).get(f"/api/v1/workloads/{w.pk}/efficiency/").json()
    assert summary["nodes_unread"] == [MISSING_8]
    assert f"Node unread:      {MISSING_8}" in stats.render(summary)
    client.force_login(alice)
    settings.DEMO = False  # a site's budget; the demo's notice of simulated readings is one query more
    with django_assert_max_num_queries(6):  # session, user; the workload; its GPUs and windows; events; its nodes
        page = client.get(f"/workloads/{w.pk}/efficiency/")
    assert f"N{MISSING_8[1:]}." in page.content.decode()

    eight = agent.post(URL, {"host": "gpu-8", "jobs": {JOB: [reading(gpus=gpus(2, 3, 1, 99))]}}, format="json")
    assert eight.json() == {"recorded": 1, "unknown": []}
    rows = {s.node: s for s in UsageSample.objects.filter(workload=w)}
    assert set(rows) == {"gpu-7", "GPU-8"}  # each node as the job's host list spells it, short
    assert (rows["gpu-7"].gpus_read, rows["gpu-7"].gpus_idle) == (3, 1)  # GPU 2 reads none (MIG): neither
    assert (rows["GPU-8"].gpus_read, rows["GPU-8"].gpus_idle) == (4, 3)  # holding 4, using 1: 3 idle
    assert rows["gpu-7"].gpu_utilisation == pytest.approx((95 + 5 + 90) / 3)
    assert {(s.source, s.gpus_milli, s.cpu_utilisation) for s in rows.values()} == {("agent", 8000, 40.0)}
    assert UsageGpuSample.objects.filter(workload=w).count() == 8
    assert set(UsageGpuWindow.objects.filter(workload=w).values_list("node", "gpu")) == {
        (node, gpu) for node in ("gpu-7", "GPU-8") for gpu in range(4)
    }
    assert set(UsageTurn.objects.filter(workload=w).values_list("node", flat=True)) == {"gpu-7", "GPU-8"}

    summary = api_as(alice).get(f"/api/v1/workloads/{w.pk}/efficiency/").json()
    assert summary["nodes_unread"] == []
    assert len(summary["per_gpu"]) == 8
    assert summary["gpus_idle"] == 4  # gpu-7's GPU 1 and GPU-8's 0, 1 and 2, judged GPU by GPU
    assert "Node unread" not in stats.render(summary)


def test_a_host_the_job_does_not_run_on_and_another_fabric_s_agent_are_refused(two_nodes, other_agent):  # noqa: F811
    client, w = two_nodes
    answer = client.post(URL, {"host": "gpu-9", "jobs": {JOB: [reading(gpus=gpus(50))]}}, format="json")
    assert answer.json() == {"recorded": 0, "unknown": [JOB]}
    # an agent fabric the PBS fabric does not name, on one of the job's very hosts
    other_agent.post("/api/v1/agent/register/", {"host": "gpu-8", "queues": ["gpu-a"]}, format="json")
    answer = other_agent.post(URL, {"host": "gpu-8", "jobs": {JOB: [reading(gpus=gpus(50))]}}, format="json")
    assert answer.json() == {"recorded": 0, "unknown": [JOB]}
    assert not UsageSample.objects.filter(workload=w).exists()
    assert not UsageTurn.objects.filter(workload=w).exists()


def test_an_agent_of_the_earlier_version_still_records_its_averaged_reading(two_nodes):
    client, w = two_nodes
    earlier = reading(gpu_utilisation=20.0, gpu_memory_mib=4000)  # no "gpus"
    assert client.post(URL, {"host": "gpu-8", "jobs": {JOB: [earlier]}}, format="json").json()["recorded"] == 1
    kept = UsageSample.objects.get(workload=w)
    assert (kept.node, kept.gpu_utilisation, kept.gpu_memory_mib, kept.gpus_read) == ("GPU-8", 20.0, 4000, None)
    assert not UsageGpuSample.objects.filter(workload=w).exists()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ([{"index": 0, "utilisation": 5, "power": 3}], "GPU 0: unknown field power."),
        ([{"index": 0, "utilisation": 150}], "GPU 0: utilisation, 0 to 100, or null where it reads none."),
        ([{"index": 1}, {"index": 1}], "GPU 1: index, each GPU's once, from 0 to 63."),
        ([{"index": True}], "GPU 0: index, each GPU's once, from 0 to 63."),
        ("0,1", 'A list of at most 64 GPUs: {"index": 0, "utilisation": 0-100 or null, "memory_mib": MiB or null}.'),
    ],
)
def test_a_wrong_gpus_field_is_refused_naming_it(two_nodes, given, says):
    client, w = two_nodes
    answer = client.post(URL, {"host": "gpu-7", "jobs": {JOB: [reading(), reading(gpus=given)]}}, format="json")
    assert answer.status_code == 400
    assert answer.json()["errors"] == {f"jobs.{JOB}.1.gpus": [says]}
    assert not UsageSample.objects.filter(workload=w).exists()


def test_one_post_for_many_jobs_costs_the_same_queries_as_for_one(two_nodes, alice, submit, django_assert_num_queries):
    client, _ = two_nodes
    pbs = Fabric.objects.get(name="pbs")
    more = []
    for n in range(5):
        other = submit(alice, name=f"native-{n}", gpus=1)
        Workload.objects.filter(pk=other.pk).update(fabric=pbs, state=State.RUNNING, external_id=f"6{n}.pbs-server",
                                                    host=f"gpu-6,gpu-7,gpu-{10 + n}")  # fmt: skip
        more.append(f"6{n}.pbs-server")
    jobs: dict[str, list[Any]] = {JOB: [reading(gpus=gpus(50, 50, 50, 50))]}
    body = {"host": "gpu-7.cluster.example", "jobs": jobs}
    with django_assert_num_queries(8) as one:  # token, agent access, host; workloads; samples; GPUs; turns; starts
        client.post(URL, body, format="json")
    jobs |= {job_id: [reading(2, gpus=gpus(10)), reading(gpus=gpus(10))] for job_id in more}
    with django_assert_num_queries(len(one.captured_queries)):
        assert client.post(URL, body, format="json").json() == {"recorded": 11, "unknown": []}


@pytest.mark.parametrize(
    ("agent", "hosts", "node"),
    [
        ("gpu-7.cluster.example", "gpu-7,gpu-8", "gpu-7"),
        ("gpu-7", "gpu-6,GPU-7.cluster.example", "GPU-7"),
        ("GPU-7.CLUSTER.EXAMPLE", "gpu-[6-8].cluster.example", "gpu-7"),
        ("gpu-7.other.example", "gpu-7.cluster.example", ""),  # another domain's gpu-7
        ("gpu-70", "gpu-7", ""),
        ("gpu-7", "", ""),
    ],
)
def test_an_agent_is_on_a_job_s_host_by_full_or_short_name_in_any_case(agent, hosts, node):
    assert native.on_host(hosts, agent) == node


def test_a_slurm_job_s_silent_node_is_named_too(alice, submit):
    slurm = Fabric.objects.create(name="slurm-x", kind="slurm", gpus_milli=8000, cpus_milli=8000, memory_mib=8000)
    w = submit(alice, name="three", gpus=1)
    Workload.objects.filter(pk=w.pk).update(fabric=slurm, host="gpu[01-03]", nodes=3)
    w.refresh_from_db()
    UsageTurn.objects.create(workload_id=w.pk, node="gpu01", last_at=timezone.now())
    UsageTurn.objects.create(workload_id=w.pk, node="gpu03", last_at=timezone.now())
    w.fabric_kind = "slurm"
    assert unread(w) == ["no readings from gpu02: its sampler step sent none from it"]
    w.fabric_kind, w.agent_fabric = "pbs", None
    assert unread(w) == [
        "no readings from gpu02: the PBS fabric names no agent fabric (its setting agent_fabric), so no agent reads "
        "its jobs"
    ]
    w.fabric_kind = "kubernetes"  # not read node by node
    assert unread(w) == []
