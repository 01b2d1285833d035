"""What Kueue would still admit on a Kubernetes fabric, per flavor and GPU resource name: where Kueue runs, a node
with idle GPUs is no room for Gridlane's work if the ClusterQueue its Jobs go through has no quota left.

The ClusterQueues Gridlane's Jobs go through are those its LocalQueues point at: LocalQueues in the namespaces
Gridlane submits to (the fabric's, or its teams' under a namespace per team), whether Gridlane keeps them
(`gl-<team>`, Kueue-owned) or IT does (a shared ClusterQueue other tenants use too). Each of them sits in a
tree: its cohort's, up to the root cohort (v1beta2 Cohort objects with `parentName`; under v1beta1 a cohort is
only a name), or alone without one. Per tree, per (flavor, GPU resource):

    tree room   the nominal quota of every ClusterQueue and Cohort in the tree (from spec.resourceGroups) less
                what every ClusterQueue in it holds (the larger of status.flavorsReservation and flavorsUsage:
                reserved quota is taken even before the Workload is admitted), other tenants' queues included
    own room    over Gridlane's ClusterQueues in the tree: nominal quota less what each holds, plus its
                borrowingLimit (no limit: the tree's room bounds it)
    free        the smaller of the two, never below zero; summed over trees, in whole units

A GPU resource no ClusterQueue of Gridlane's covers is 0: Kueue does not admit work asking for it. Lending
limits and fair-share preemption are left out: the answer says where work could start, Kueue still decides.
`free` is pure, over the objects as the API returns them (dicts); `read` lists them with the fabric's client, one
call per kind (LocalQueues, ClusterQueues, Cohorts under v1beta2, ResourceFlavors), whatever the number of queues.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fabrics.base import FabricError
from fabrics.kubernetes.client import KubeClient
from fabrics.kubernetes.parse import quantity

Obj = Mapping[str, Any]
Key = tuple[str, str]  # (flavor, resource)
GpuResource = Callable[[str], bool]


def cohort_of(queue: Obj) -> str:
    spec = queue.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")


def nominal(obj: Obj, gpu: GpuResource) -> tuple[dict[Key, float], dict[Key, float]]:
    """Nominal quota and borrowing limits per (flavor, GPU resource) of a ClusterQueue or Cohort."""
    quota: dict[Key, float] = {}
    borrow: dict[Key, float] = {}
    for group in (obj.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if not gpu(resource.get("name", "")):
                    continue
                key = (str(flavor.get("name")), str(resource["name"]))
                quota[key] = quota.get(key, 0.0) + float(quantity(resource.get("nominalQuota", 0)))
                if resource.get("borrowingLimit") is not None:
                    borrow[key] = borrow.get(key, 0.0) + float(quantity(resource["borrowingLimit"]))
    return quota, borrow


def held(queue: Obj, gpu: GpuResource) -> dict[Key, float]:
    """What a ClusterQueue holds per (flavor, GPU resource): the larger of reserved and in use."""
    status = queue.get("status") or {}
    out: dict[Key, float] = {}
    for field in ("flavorsReservation", "flavorsUsage"):
        for flavor in status.get(field) or []:
            for resource in flavor.get("resources") or []:
                if gpu(resource.get("name", "")):
                    key = (str(flavor.get("name")), str(resource["name"]))
                    out[key] = max(out.get(key, 0.0), float(quantity(resource.get("total", 0))))
    return out


def free(
    cluster_queues: Iterable[Obj],
    cohorts: Iterable[Obj],
    local_queues: Iterable[Obj],
    ours: Callable[[str], bool],
    gpu: GpuResource,
) -> dict[Key, int] | None:
    """Free quota per (flavor, GPU resource) over the ClusterQueues behind the LocalQueues in namespaces for which
    `ours` is true (see the module docstring); None when there are none (Kueue is not on Gridlane's path)."""
    queues = {str(q["metadata"]["name"]): q for q in cluster_queues}
    chosen = {
        str((lq.get("spec") or {}).get("clusterQueue") or "")
        for lq in local_queues
        if ours(str(lq["metadata"].get("namespace") or ""))
    } & set(queues)
    if not chosen:
        return None
    cohorts = list(cohorts)
    parents = {str(c["metadata"]["name"]): str((c.get("spec") or {}).get("parentName") or "") for c in cohorts}

    def root(cohort: str) -> str:
        seen = set()
        while parents.get(cohort) and cohort not in seen:
            seen.add(cohort)
            cohort = parents[cohort]
        return cohort

    tree: dict[str, dict[Key, float]] = {}  # root -> room in the whole tree
    own: dict[str, dict[Key, float]] = {}  # root -> room over Gridlane's ClusterQueues in it
    for name, queue in queues.items():
        cohort = cohort_of(queue)
        top = f"cohort:{root(cohort)}" if cohort else f"queue:{name}"
        quota, borrow = nominal(queue, gpu)
        using = held(queue, gpu)
        room = tree.setdefault(top, {})
        for key in quota.keys() | using.keys():
            room[key] = room.get(key, 0.0) + quota.get(key, 0.0) - using.get(key, 0.0)
        if name in chosen:
            mine = own.setdefault(top, {})
            for key in quota:
                extra = borrow.get(key, float("inf")) if cohort else 0.0
                mine[key] = mine.get(key, 0.0) + max(0.0, quota[key] - using.get(key, 0.0) + extra)
    for node in cohorts:
        top = f"cohort:{root(str(node['metadata']['name']))}"
        if top in tree:
            room = tree[top]
            for key, amount in nominal(node, gpu)[0].items():
                room[key] = room.get(key, 0.0) + amount
    out: dict[Key, int] = {}
    for top, mine in own.items():
        for key, amount in mine.items():
            out[key] = out.get(key, 0) + int(max(0.0, min(amount, tree[top].get(key, 0.0))))
    return out


def read(
    client: KubeClient, ours: Callable[[str], bool], gpu: GpuResource
) -> tuple[dict[Key, int] | None, dict[str, dict[str, str]], str]:
    """What Kueue would still admit for Gridlane per (flavor, GPU resource), each flavor's nodeLabels, and a note
    for the capacity's detail; (None, {}, note) where Kueue is not on Gridlane's path or cannot be read."""
    try:
        version = client.kueue_version
        if not version:
            return None, {}, ""
        local_queues = client.kueue_list("localqueues", "")
        if not local_queues:
            return None, {}, ""
        cluster_queues = client.kueue_list("clusterqueues", "")
        cohorts = client.kueue_list("cohorts", "") if version == "v1beta2" else []
        flavors = {
            str(f["metadata"]["name"]): dict((f.get("spec") or {}).get("nodeLabels") or {})
            for f in client.kueue_list("resourceflavors", "")
        }
    except FabricError as error:
        return None, {}, f"; Kueue's quota is not readable, so nodes alone say what is free ({error})"
    left = free(cluster_queues, cohorts, local_queues, ours, gpu)
    if left is None:
        return None, {}, ""
    said = ", ".join(f"{n} {r} in {f}" for (f, r), n in sorted(left.items())) or "none"
    return left, flavors, f"; Kueue's quota left: {said}"
