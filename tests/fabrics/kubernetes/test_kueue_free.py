"""Where Kueue runs, what is free is the smaller of what nodes have idle and what the ClusterQueue Gridlane's Jobs go
through would still admit, per GPU resource name and flavor (fabrics/kubernetes/quota.py, free.py); the double keeps
ClusterQueue usage in step with admitted Workloads, as Kueue does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import Resources
from fabrics.kubernetes import free, quota
from fabrics.kubernetes.fabric import KubernetesFabric
from fabrics.kubernetes.kueue import Limits, Team
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect
from tests.fabrics.kubernetes.test_double import call
from tests.k8s_double import ApiDouble, crds, node

TENANT = "physics"  # another tenant's namespace, sharing the ClusterQueue
H100 = {"nvidia.com/gpu.product": "h100"}


@pytest.fixture
def double() -> Iterator[ApiDouble]:
    nodes = [
        node("h100-1", labels=H100),
        node("h100-2", labels=H100),
        node("mig-1", gpus=7, gpu_resource="nvidia.com/mig-1g.10gb"),
    ]
    with ApiDouble(namespaces=(NAMESPACE, TENANT), nodes=nodes) as api:
        yield api


@pytest.fixture
def kueue_fabric(double: ApiDouble, tmp_path: Path) -> KubernetesFabric:
    fabric = connect({"kubeconfig": str(double.kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE))})
    client = fabric.client
    client.kueue_create("resourceflavors", obj("ResourceFlavor", "h100", {"nodeLabels": H100}))
    client.kueue_create("resourceflavors", obj("ResourceFlavor", "mig", {}))
    groups = [
        group("h100", {"nvidia.com/gpu": 4}),
        group("mig", {"nvidia.com/mig-1g.10gb": 7}),
    ]
    client.kueue_create("clusterqueues", obj("ClusterQueue", "shared", {"resourceGroups": groups}))
    for namespace in (NAMESPACE, TENANT):
        client.kueue_create("localqueues", obj("LocalQueue", "shared", {"clusterQueue": "shared"}, namespace))
    return fabric


def obj(kind: str, name: str, spec: dict[str, Any], namespace: str = "") -> dict[str, Any]:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": spec}


def group(flavor: str, quotas: dict[str, int]) -> dict[str, Any]:
    resources = [{"name": name, "nominalQuota": str(n)} for name, n in quotas.items()]
    return {"coveredResources": list(quotas), "flavors": [{"name": flavor, "resources": resources}]}


def tenant_job(fabric: KubernetesFabric, name: str, gpus: int) -> None:
    """Another tenant's Job through the shared ClusterQueue (Kueue suspends it until it admits it)."""
    container: dict[str, Any] = {"name": "x", "image": "busybox:1.36", "command": ["sleep", "infinity"]}
    container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": TENANT, "labels": {"kueue.x-k8s.io/queue-name": "shared"}},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }
    fabric.client.create("jobs", body)


def free_h100(fabric: KubernetesFabric) -> int:
    observed = fabric.capacity().free
    assert observed is not None
    return observed.gpus_free("h100")


def test_a_queue_used_up_by_another_tenant_is_not_free_though_nodes_are_idle(kueue_fabric, double):
    assert free_h100(kueue_fabric) == 4  # 16 idle on the nodes, 4 in the quota
    tenant_job(kueue_fabric, "theirs", 4)
    double.kueue_admit(TENANT, "theirs")
    wait_until(lambda: any(p["status"].get("phase") == "Running" for p in double.objects("pods", TENANT)), timeout=60)
    capacity = kueue_fabric.capacity()
    assert capacity.free is not None
    assert capacity.free.gpus_free("h100") == 0  # 12 idle on the nodes, none Kueue would admit
    assert capacity.free.gpus_free("1g.10gb") == 7  # the MIG resource's quota is untouched
    assert capacity.free.largest.gpus_milli == 7000
    assert "Kueue's quota left: 0 nvidia.com/gpu in h100, 7 nvidia.com/mig-1g.10gb in mig" in capacity.detail
    call(double, "DELETE", f"/apis/batch/v1/namespaces/{TENANT}/jobs/theirs?propagationPolicy=Background")
    wait_until(lambda: free_h100(kueue_fabric) == 4, timeout=60)  # its quota is given back with its Job


def test_the_double_keeps_usage_in_step_with_admitted_workloads_and_the_crd(kueue_fabric, double):
    tenant_job(kueue_fabric, "theirs", 3)
    double.kueue_admit(TENANT, "theirs")
    (queue,) = double.objects("clusterqueues.kueue.x-k8s.io")
    usage = {
        f["name"]: {r["name"]: (r["total"], r["borrowed"]) for r in f["resources"]}
        for f in queue["status"]["flavorsUsage"]
    }
    assert usage == {"h100": {"nvidia.com/gpu": ("3", "0")}, "mig": {"nvidia.com/mig-1g.10gb": ("0", "0")}}
    assert queue["status"]["admittedWorkloads"] == 1
    (workload,) = double.objects("workloads.kueue.x-k8s.io", TENANT)
    assert workload["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "h100"}
    for plural, found in (("clusterqueues", queue), ("workloads", workload)):
        checker = crds.Checker()
        checker.check(found, crds.schema(plural, "v1beta2"), "")
        assert (checker.causes, checker.unknown) == ([], [])
    assert free_h100(kueue_fabric) == 1


def test_quota_in_a_cohort_counts_what_the_tree_has_left_and_a_queue_may_borrow():
    def queue(name: str, cohort: str, gpus: int, used: int, borrow: int | None = None) -> dict[str, Any]:
        resource: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}
        if borrow is not None:
            resource["borrowingLimit"] = str(borrow)
        usage = [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": str(used), "borrowed": "0"}]}]
        spec = {"cohortName": cohort, "resourceGroups": [{"flavors": [{"name": "h100", "resources": [resource]}]}]}
        return {"metadata": {"name": name}, "spec": spec, "status": {"flavorsUsage": usage}}

    root = {"metadata": {"name": "site"}, "spec": {"resourceGroups": [group("h100", {"nvidia.com/gpu": 6})]}}
    mine = {"metadata": {"name": "gl", "namespace": NAMESPACE}, "spec": {"clusterQueue": "ours"}}
    theirs = queue("theirs", "site", 2, 5)  # borrows 3 of the cohort's 6
    ours = [mine]
    tree = [root]
    # 2 nominal + 6 in the cohort + 2 theirs - 5 used = 5 left in the tree; ours may take all of it
    assert quota.free([queue("ours", "site", 2, 0), theirs], tree, ours, lambda ns: ns == NAMESPACE, free.is_gpu) == {
        ("h100", "nvidia.com/gpu"): 5
    }
    # a borrowing limit of 1: its own 2 and 1 more
    limited = queue("ours", "site", 2, 0, borrow=1)
    assert quota.free([limited, theirs], tree, ours, lambda ns: ns == NAMESPACE, free.is_gpu) == {
        ("h100", "nvidia.com/gpu"): 3
    }
    # no LocalQueue in Gridlane's namespaces: Kueue is not on its path
    assert quota.free([limited, theirs], tree, ours, lambda ns: False, free.is_gpu) is None


def test_one_observation_lists_each_kind_once_whatever_the_number_of_queues(kueue_fabric, double):
    client = kueue_fabric.client
    for n in range(3):
        client.kueue_create(
            "clusterqueues",
            obj("ClusterQueue", f"team-{n}", {"resourceGroups": [group("h100", {"nvidia.com/gpu": 0})]}),
        )
        client.kueue_create("localqueues", obj("LocalQueue", f"team-{n}", {"clusterQueue": f"team-{n}"}, NAMESPACE))
    kueue_fabric.capacity()  # (API discovery is read once per client)
    double.forget_calls()
    assert free_h100(kueue_fabric) == 4
    paths = sorted(r.path for r in double.calls())
    assert paths == [
        "/api/v1/nodes",
        "/api/v1/pods",
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
        "/apis/kueue.x-k8s.io/v1beta2/cohorts",
        "/apis/kueue.x-k8s.io/v1beta2/localqueues",
        "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
    ]


def test_a_fabric_that_may_not_read_kueue_says_so_and_counts_nodes_alone(kueue_fabric, double):
    kueue_fabric.capacity()
    double.fail("GET", r"/clusterqueues$", 403)
    capacity = kueue_fabric.capacity()
    assert capacity.free is not None
    assert capacity.free.gpus_free("h100") == 16
    assert "Kueue's quota is not readable, so nodes alone say what is free" in capacity.detail


def test_on_a_kueue_owned_fabric_a_team_queue_counts_its_own_quota_and_what_it_may_borrow(double, tmp_path):
    settings = {"kubeconfig": str(double.kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE))}
    owned = connect(settings | {"kueue_owned": True, "gpu_flavor": "h100"})
    owned.reconcile_kueue("7", [Team("vision", None, Resources(2000, 0, 0), Limits(gpus_milli=4000))])
    capacity = owned.capacity()
    assert capacity.free is not None
    # its reservation of 2 and 2 more it may borrow from the fabric's cohort (16 declared, 2 reserved)
    assert capacity.free.gpus_free("h100") == 4
    assert capacity.free.gpus_free("1g.10gb") == 0  # no queue of Gridlane's covers the MIG resource
