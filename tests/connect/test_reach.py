"""The connect gate passes a job's server only on its fabric's own nodes, and hands the proxy the address it
checked (portal.connect.server_reach): a server reported at another address is never connected to."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fabrics.base import Endpoint, JobState, JobStatus
from portal.connect import gate
from portal.worker import pods
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload

pytestmark = pytest.mark.django_db

TOKEN = "t" * 32


@pytest.mark.parametrize(
    "host",
    ["169.254.169.254", "0xa9fea9fe", "::ffff:169.254.169.254", "10.0.0.1", "8.8.8.8", "224.0.0.1", "0.0.0.0"],  # noqa: S104
)
def test_a_server_off_the_fabrics_nodes_is_unreachable_through_the_proxy(running, alice, host):
    w = running(alice)
    assert notebook_endpoint.record(w, Endpoint(host, 8888, TOKEN, "/"))
    decision = gate._decision_for(w)
    assert decision.verdict is gate.Verdict.UNREACHABLE
    assert decision.address is None


@pytest.mark.parametrize("host", ["127.0.0.1", "2130706433", "127.1", "localhost", "LOCALHOST."])
def test_a_server_on_the_node_passes_pinned_to_the_address_checked(running, alice, host):
    w = running(alice)  # Slurm says it runs on localhost
    assert notebook_endpoint.record(w, Endpoint(host, 8888, TOKEN, "/"))
    decision = gate._decision_for(w)
    assert decision.verdict is gate.Verdict.PASS
    assert decision.address is not None
    assert decision.address.host in ("127.0.0.1", "::1")
    assert decision.server is not None
    assert decision.server.host == host


def test_it_lists_a_network_for_servers_elsewhere(running, alice, settings):
    w = running(alice)
    assert notebook_endpoint.record(w, Endpoint("10.30.1.2", 8888, TOKEN, "/"))
    assert gate._decision_for(w).verdict is gate.Verdict.UNREACHABLE
    settings.GRIDLANE_CONNECT_NETWORKS = ["10.30.0.0/16"]
    assert gate._decision_for(w).address == Endpoint("10.30.1.2", 8888, TOKEN, "/")


@pytest.mark.parametrize(
    ("host", "verdict"),
    [("10.244.1.17", gate.Verdict.PASS), ("fd00:10:244::17", gate.Verdict.PASS),
     ("10.244.1.18", gate.Verdict.UNREACHABLE), ("10.244.2.17", gate.Verdict.UNREACHABLE),
     ("gpu-node-1", gate.Verdict.UNREACHABLE), ("127.0.0.1", gate.Verdict.UNREACHABLE),
     ("169.254.169.254", gate.Verdict.UNREACHABLE), ("8.8.8.8", gate.Verdict.UNREACHABLE)],
)  # fmt: skip
def test_a_kubernetes_job_is_reached_on_its_own_pods_and_nowhere_else(running, alice, hpc, host, verdict):
    hpc.kind = "kubernetes"
    hpc.save(update_fields=["kind"])
    w = running(alice)
    Workload.objects.filter(pk=w.pk).update(host="gpu-node-1")  # Kubernetes reports the node's name
    other = running(alice)  # another pod on the pod network, 10.244.1.18
    polled = {"42": JobStatus(JobState.RUNNING, addresses=("10.244.1.17", "fd00:10:244::17"))}
    assert pods.record([w], polled, timezone.now()) == 1
    assert pods.record([other], {"42": JobStatus(JobState.RUNNING, addresses=("10.244.1.18",))}, timezone.now()) == 1
    assert notebook_endpoint.record(w, Endpoint(host, 8888, TOKEN, "/"))
    w.refresh_from_db()
    assert gate._decision_for(w).verdict is verdict


def test_a_kubernetes_job_whose_pods_are_not_yet_known_is_reached_nowhere_until_they_are(running, alice, hpc, settings):
    hpc.kind = "kubernetes"
    hpc.save(update_fields=["kind"])
    w = running(alice)
    assert notebook_endpoint.record(w, Endpoint("10.244.1.17", 8888, TOKEN, "/"))
    w.refresh_from_db()
    assert gate._decision_for(w).verdict is gate.Verdict.UNREACHABLE  # the pod network alone lets nothing through
    assert pods.record([w], {"42": JobStatus(JobState.RUNNING, addresses=("10.244.1.17",))}, timezone.now()) == 1
    assert pods.record([w], {"42": JobStatus(JobState.RUNNING, addresses=("10.244.1.17",))}, timezone.now()) == 0
    assert gate._decision_for(w).address == Endpoint("10.244.1.17", 8888, TOKEN, "/")
    # The pod was replaced: its old address no longer passes; one IT lists does.
    assert pods.record([w], {"42": JobStatus(JobState.RUNNING, addresses=("10.244.3.9",))}, timezone.now()) == 1
    assert gate._decision_for(w).verdict is gate.Verdict.UNREACHABLE
    settings.GRIDLANE_CONNECT_NETWORKS = ["10.244.1.0/24"]
    assert gate._decision_for(w).verdict is gate.Verdict.PASS
