"""What a Kubernetes cluster has free now: ready nodes' allocatable minus the requests of every live pod on them
(Gridlane's and other tenants'), per GPU resource name and GPU type.

Rules:
- A node counts only when it is Ready and schedulable; a pod only when it is bound to such a node and Pending or
  Running (Succeeded and Failed pods hold nothing).
- Each extended resource whose name ends in `/gpu` (nvidia.com/gpu, amd.com/gpu) or is a MIG profile
  (nvidia.com/mig-1g.10gb) is a pool of its own, named by the resource; its GPU type is the node's label
  `nvidia.com/gpu.product` (or the `type_label` asked for), else the MIG profile, else untyped.
- GPUs are counted in whole units of the resource (a MIG slice is one unit of its own pool).
- Where Kueue runs, `quota` is what the ClusterQueues Gridlane's Jobs go through would still admit, per (flavor,
  GPU resource) (fabrics/kubernetes/quota.py), and `flavors` each ResourceFlavor's nodeLabels (a flavor without
  them is any node): a node's idle GPUs of a resource count only as far as the quota of the flavors matching the
  node has room left, the nodes with the most idle first (so the most free on one node is the smaller of the two
  as well). A resource the quota does not name is not free at all.
Pure: nodes and pods as the API returns them (dicts), read by the fabric's client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fabrics.base import Resources
from fabrics.kubernetes.parse import quantity
from fabrics.live import UNTYPED, FreeNow, Node, from_nodes

Obj = Mapping[str, Any]
TYPE_LABEL = "nvidia.com/gpu.product"
_GPU_RESOURCE = re.compile(r"^[a-z0-9.-]+/(gpu|mig-[0-9a-z.]+)$")


def gpu_resources(values: Mapping[str, Any]) -> dict[str, int]:
    """Whole GPU units per GPU resource name."""
    return {name: int(float(quantity(v))) for name, v in values.items() if _GPU_RESOURCE.match(name)}


def gpu_type(node: Obj, resource: str, type_label: str = TYPE_LABEL) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    if "/mig-" in resource:
        return resource.split("/mig-", 1)[1]
    return str(labels.get(type_label) or UNTYPED).lower()


def ready(node: Obj) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def requests(pod: Obj) -> dict[str, float]:
    """What a pod asks for, summed over its containers (an init container's ask overlaps; the larger counts)."""
    total: dict[str, float] = {}
    spec = pod.get("spec") or {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        asked = dict(resources.get("limits") or {}) | dict(resources.get("requests") or {})
        for name, value in asked.items():
            total[name] = total.get(name, 0.0) + float(quantity(value))
    for container in spec.get("initContainers") or []:
        resources = container.get("resources") or {}
        asked = dict(resources.get("limits") or {}) | dict(resources.get("requests") or {})
        for name, value in asked.items():
            total[name] = max(total.get(name, 0.0), float(quantity(value)))
    return total


def is_gpu(resource: str) -> bool:
    return bool(_GPU_RESOURCE.match(resource))


class Quota:
    """What is left of Kueue's quota as nodes take from it (see the module docstring)."""

    def __init__(self, left: Mapping[tuple[str, str], int], flavors: Mapping[str, Mapping[str, str]]) -> None:
        self.left = dict(left)
        self.flavors = flavors

    def take(self, node: Obj, resource: str, idle: int) -> int:
        """Of `idle` GPUs of `resource` on the node, how many Kueue would admit into; taken off the quota."""
        labels = (node.get("metadata") or {}).get("labels") or {}
        given = 0
        for key in sorted(self.left, key=lambda k: (-len(self.flavors.get(k[0]) or {}), k)):  # the narrowest first
            flavor, name = key
            wanted = self.flavors.get(flavor) or {}
            if name != resource or any(labels.get(k) != v for k, v in wanted.items()):
                continue
            part = min(idle - given, self.left[key])
            self.left[key] -= part
            given += part
        return given


def observe(
    nodes: Sequence[Obj],
    pods: Sequence[Obj],
    type_label: str = TYPE_LABEL,
    quota: Mapping[tuple[str, str], int] | None = None,
    flavors: Mapping[str, Mapping[str, str]] | None = None,
) -> FreeNow:
    """The observation (see the module docstring)."""
    usable = {str(n["metadata"]["name"]): n for n in nodes if ready(n)}
    used: dict[str, dict[str, float]] = {name: {} for name in usable}
    for pod in pods:
        where = (pod.get("spec") or {}).get("nodeName")
        if where not in used or (pod.get("status") or {}).get("phase") not in ("Pending", "Running"):
            continue
        for name, value in requests(pod).items():
            used[where][name] = used[where].get(name, 0.0) + value
    idle_of = {
        name: {r: max(0, c - int(used[name].get(r, 0.0) + 0.999)) for r, c in gpu_resources(_allocatable(n)).items()}
        for name, n in usable.items()
    }
    order = list(usable)
    kueue = None
    if quota is not None:
        kueue = Quota(quota, flavors or {})
        order.sort(key=lambda name: (-sum(idle_of[name].values()), name))
    out = []
    for name in order:
        node = usable[name]
        allocatable = _allocatable(node)
        taken = used[name]
        units = gpu_resources(allocatable)
        gpus: dict[str, int] = {}
        idle: dict[str, int] = {}
        pools = []
        for resource, count in units.items():
            flavor = gpu_type(node, resource, type_label)
            room = idle_of[name][resource]
            if kueue is not None:
                room = kueue.take(node, resource, room)
            gpus[flavor] = gpus.get(flavor, 0) + count
            idle[flavor] = idle.get(flavor, 0) + room
            pools.append(resource)
        free_cpus = max(0.0, float(quantity(allocatable.get("cpu", 0))) - taken.get("cpu", 0.0))
        free_memory = max(0.0, float(quantity(allocatable.get("memory", 0))) - taken.get("memory", 0.0))
        amount = Resources(1000 * sum(idle.values()), int(free_cpus * 1000), int(free_memory / (1 << 20)))
        out.append(Node(name, tuple(pools) or ("",), gpus, idle, amount))
    return from_nodes(out)


def _allocatable(node: Obj) -> Mapping[str, Any]:
    return (node.get("status") or {}).get("allocatable") or {}
