"""What a Kubernetes cluster has free now, per GPU resource name and type (fabrics/kubernetes/free.py), from
nodes and pods in the shape the API returns them."""

from __future__ import annotations

from typing import Any

from fabrics.base import Resources
from fabrics.kubernetes import free


def node(name: str, allocatable: dict[str, str], labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": extra.get("spec", {}),
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": extra.get("ready", "True")}]},
    }


def pod(where: str, limits: dict[str, str], phase: str = "Running") -> dict[str, Any]:
    return {"spec": {"nodeName": where, "containers": [{"resources": {"limits": limits}}]}, "status": {"phase": phase}}


NODES = [
    node("h1", {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}, {free.TYPE_LABEL: "NVIDIA-H100-80GB-HBM3"}),
    node("a1", {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"}, {free.TYPE_LABEL: "A100"}),
    node("m1", {"cpu": "32", "memory": "128Gi", "nvidia.com/mig-1g.10gb": "7"}),
    node("cordoned", {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "8"}, spec={"unschedulable": True}),
    node("notready", {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "8"}, ready="False"),
]


def test_allocatable_minus_every_live_pods_requests_per_resource_and_type():
    pods = [
        pod("h1", {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "6"}),  # another tenant's
        pod("h1", {"nvidia.com/gpu": "2"}, phase="Succeeded"),  # done: holds nothing
        pod("a1", {"cpu": "1", "nvidia.com/gpu": "4"}, phase="Pending"),  # bound and pending: holds its GPUs
        pod("m1", {"nvidia.com/mig-1g.10gb": "3"}),
        pod("cordoned", {"nvidia.com/gpu": "1"}),
    ]
    observed = free.observe(NODES, pods)
    assert observed.free_by_type == {"nvidia-h100-80gb-hbm3": 2, "a100": 0, "1g.10gb": 4}
    pools = {(p.name, p.gpu_type): (p.gpus_total, p.gpus_free) for p in observed.pools}
    assert pools == {
        ("nvidia.com/gpu", "nvidia-h100-80gb-hbm3"): (8, 2),
        ("nvidia.com/gpu", "a100"): (4, 0),
        ("nvidia.com/mig-1g.10gb", "1g.10gb"): (7, 4),
    }
    assert observed.free.cpus_milli == (64 - 8 + 32 - 1 + 32) * 1000
    assert observed.room_for(Resources(2000, 1000, 1024), gpu_type="nvidia-h100-80gb-hbm3")
    assert not observed.room_for(Resources(1000, 1000, 1024), gpu_type="a100")


def test_an_empty_cluster_has_nothing_free():
    observed = free.observe([], [])
    assert observed.free == Resources()
    assert not observed.room_for(Resources(1000, 0, 0))


def test_kueues_quota_caps_each_flavor_on_the_nodes_its_labels_name_the_emptiest_first():
    h100 = {free.TYPE_LABEL: "H100"}
    nodes = [node("h1", {"nvidia.com/gpu": "8"}, h100), node("h2", {"nvidia.com/gpu": "8"}, h100)]
    nodes.append(node("a1", {"nvidia.com/gpu": "4"}, {free.TYPE_LABEL: "A100"}))
    pods = [pod("h1", {"nvidia.com/gpu": "5"})]  # h1 has 3 idle, h2 8, a1 4
    flavors = {"h100": h100, "any": {}}
    observed = free.observe(nodes, pods, quota={("h100", "nvidia.com/gpu"): 6}, flavors=flavors)
    # the h100 flavor's 6 go to h2 (the emptiest) first; no flavor names the A100 node's labels
    assert observed.free_by_type == {"h100": 6, "a100": 0}
    assert observed.largest_by_type == {"h100": 6, "a100": 0}
    # a flavor without nodeLabels is any node: its quota adds to the named one's where both match
    both = free.observe(
        nodes, pods, quota={("h100", "nvidia.com/gpu"): 6, ("any", "nvidia.com/gpu"): 3}, flavors=flavors
    )
    assert both.gpus_free() == 9  # (which type gets the general flavor's GPUs is not promised)
    assert free.observe(nodes, pods, quota={}, flavors=flavors).free == Resources(0, 0, 0)
    assert free.observe(nodes, pods).free_by_type == {"h100": 11, "a100": 4}  # no Kueue on the path: nodes alone
