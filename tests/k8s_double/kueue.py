"""What Kueue's controllers do in the double (its CRDs' schemas, rules and defaults are enforced by crds.py): the
status a ClusterQueue or LocalQueue gets once Kueue has seen it, the Workload made for a Job that names a
LocalQueue, and admission (quota reserved, then the Job unsuspended).

Workload conditions follow Kueue 0.19: `QuotaReserved` False with reason `Pending` and the flavor assigner's
message while it waits for quota, or reason `Inadmissible` when its LocalQueue or ClusterQueue is missing or
stopped; then `QuotaReserved` and `Admitted` True; `Evicted` True (reason `Preempted`, `InactiveWorkload`, ...)
when it is taken back.

Quota is accounted as Kueue's cache does (`account`): an admitted Workload carries `status.admission` (its
ClusterQueue, and per pod set the flavor of each resource and what it uses; cleared on eviction), and each
ClusterQueue's `status.flavorsReservation` / `flavorsUsage` sum the Workloads that hold quota now (reserved, their
Job neither gone nor finished), per flavor and resource of its resourceGroups, with what is borrowed beyond its
nominal quota; `reservingWorkloads` / `admittedWorkloads` count them.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from decimal import Decimal
from typing import Any

from tests.k8s_double.objects import BY_NAME, now_rfc3339, quantity
from tests.k8s_double.pods import _condition, _requests, _set_condition, _true, job_finished
from tests.k8s_double.server import Store

JOBS, WORKLOADS = BY_NAME["jobs.batch"], BY_NAME["workloads.kueue.x-k8s.io"]
LOCAL_QUEUES, CLUSTER_QUEUES = BY_NAME["localqueues.kueue.x-k8s.io"], BY_NAME["clusterqueues.kueue.x-k8s.io"]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID = "kueue.x-k8s.io/job-uid"
PENDING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
    "default-flavor, 1 more needed"
)


def default(kind: str, obj: dict[str, Any], *, created: bool) -> None:
    """On create, the status Kueue's controller writes once it has seen a queue."""
    if created and kind in ("ClusterQueue", "LocalQueue", "Cohort"):
        message = {"ClusterQueue": "Can admit new workloads", "LocalQueue": "Can submit new workloads to localQueue"}
        obj["status"] = {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": message.get(kind, "Cohort is ready"),
                    "lastTransitionTime": now_rfc3339(),
                    "observedGeneration": 1,
                }
            ]
        }
        if kind != "Cohort":
            obj["status"] |= {"pendingWorkloads": 0, "reservingWorkloads": 0, "admittedWorkloads": 0}
        if kind == "ClusterQueue":
            rows = _usage(obj, {})
            obj["status"] |= {"flavorsReservation": rows, "flavorsUsage": rows}


def workload_for(store: Store, job: dict[str, Any], pending: str) -> None:
    """The Workload Kueue's job reconciler makes for a Job naming a LocalQueue: pending on quota, or inadmissible
    when no LocalQueue of that name is in the Job's namespace (only when the cluster holds LocalQueues at all)."""
    meta, spec = job["metadata"], job["spec"]
    queue = meta["labels"][QUEUE_LABEL]
    condition = _condition("QuotaReserved", "False", "Pending", pending, probe=False)
    if store.items(LOCAL_QUEUES) and store.get(LOCAL_QUEUES, meta["namespace"], queue) is None:
        condition = _condition("QuotaReserved", "False", "Inadmissible", f"LocalQueue {queue} doesn't exist", False)
    store.create(
        WORKLOADS,
        meta["namespace"],
        {
            "apiVersion": WORKLOADS.api_version,
            "kind": "Workload",
            "metadata": {
                "name": f"job-{meta['name']}-{uuid.uuid4().hex[:5]}"[:253],
                "labels": {JOB_UID: meta["uid"]},
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}
                    | {"controller": True, "blockOwnerDeletion": True}
                ],
            },
            "spec": {
                "active": True,
                "queueName": queue,
                "podSets": [{"name": "main", "count": spec.get("parallelism", 1), "template": spec["template"]}],
            },
            "status": {"conditions": [condition | {"observedGeneration": 1}]},
        },
        manager="kueue",
    )


def workloads_of(store: Store, job: dict[str, Any]) -> list[dict[str, Any]]:
    uid = job["metadata"]["uid"]
    return [
        w
        for w in store.items(WORKLOADS, job["metadata"]["namespace"])
        if (w["metadata"].get("labels") or {}).get(JOB_UID) == uid
    ]


def admit(store: Store, namespace: str, job_name: str) -> None:
    """What Kueue does when a ClusterQueue admits the workload: reserve quota, then unsuspend the Job."""
    job = store.get(JOBS, namespace, job_name)
    if job is None:
        raise KeyError(job_name)
    queue = store.get(LOCAL_QUEUES, namespace, (job["metadata"].get("labels") or {}).get(QUEUE_LABEL, ""))
    cluster_queue = str(((queue or {}).get("spec") or {}).get("clusterQueue") or "cluster-queue")
    for workload in workloads_of(store, job):
        conditions = workload.setdefault("status", {}).setdefault("conditions", [])
        workload["status"]["admission"] = _admission(store, cluster_queue, workload)
        message = f"Quota reserved in ClusterQueue {cluster_queue}"
        _set_condition(conditions, _condition("QuotaReserved", "True", "QuotaReserved", message, probe=False))
        _set_condition(conditions, _condition("Admitted", "True", "Admitted", "The workload is admitted", False))
        store.touch(workload)
    job["spec"]["suspend"] = False
    store.touch(job)
    account(store)


def evict(store: Store, namespace: str, job_name: str, reason: str, message: str) -> None:
    """Kueue takes an admitted workload back (preemption, a stopped queue): Evicted True, the Job suspended."""
    job = store.get(JOBS, namespace, job_name)
    if job is None:
        raise KeyError(job_name)
    for workload in workloads_of(store, job):
        conditions = workload.setdefault("status", {}).setdefault("conditions", [])
        workload["status"].pop("admission", None)  # Kueue clears it with the reservation
        _set_condition(conditions, _condition("Evicted", "True", reason, message, probe=False))
        _set_condition(conditions, _condition("QuotaReserved", "False", "Pending", message, probe=False))
        _set_condition(conditions, _condition("Admitted", "False", "NoReservation", "The workload has no reservation",
                                              False))  # fmt: skip
        store.touch(workload)
    job["spec"]["suspend"] = True
    store.touch(job)
    account(store)


def _admission(store: Store, cluster_queue: str, workload: dict[str, Any]) -> dict[str, Any]:
    """What Kueue's flavor assigner writes: per pod set, each resource's flavor (the first of the ClusterQueue's
    flavors covering it; `default-flavor` when the ClusterQueue is not there) and the pod set's total use."""
    queue = store.get(CLUSTER_QUEUES, "", cluster_queue) or {}
    flavor_of: dict[str, str] = {}
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                flavor_of.setdefault(resource["name"], flavor["name"])
    assignments = []
    for pod_set in workload["spec"]["podSets"]:
        count = int(pod_set.get("count", 1))
        used = {name: amount * count for name, amount in _requests(pod_set["template"]).items()}
        assignments.append(
            {
                "name": pod_set["name"],
                "count": count,
                "flavors": {name: flavor_of.get(name, "default-flavor") for name in used},
                "resourceUsage": {name: _format(amount) for name, amount in used.items()},
            }
        )
    return {"clusterQueue": cluster_queue, "podSetAssignments": assignments}


def account(store: Store) -> None:
    """Each ClusterQueue's usage from the Workloads holding quota now (see the module docstring); a ClusterQueue
    is written only when its status changes."""
    jobs = {job["metadata"]["uid"]: job for job in store.items(JOBS)}
    used: defaultdict[str, defaultdict[tuple[str, str], Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    holding: defaultdict[str, int] = defaultdict(int)
    for workload in store.items(WORKLOADS):
        status = workload.get("status") or {}
        admission = status.get("admission")
        job = jobs.get((workload["metadata"].get("labels") or {}).get(JOB_UID, ""))
        if not admission or not _true(workload, "QuotaReserved"):
            continue
        if job is None or job["metadata"].get("deletionTimestamp") or job_finished(job) or _true(workload, "Finished"):
            continue
        holding[admission["clusterQueue"]] += 1
        for assignment in admission.get("podSetAssignments") or []:
            for name, amount in (assignment.get("resourceUsage") or {}).items():
                flavor = (assignment.get("flavors") or {}).get(name, "default-flavor")
                used[admission["clusterQueue"]][(flavor, name)] += quantity(amount)
    for queue in store.items(CLUSTER_QUEUES):
        name = queue["metadata"]["name"]
        flavors = _usage(queue, used[name])
        status = dict(queue.get("status") or {})
        status |= {"flavorsReservation": flavors, "flavorsUsage": flavors}
        status |= {"reservingWorkloads": holding[name], "admittedWorkloads": holding[name]}
        if status != queue.get("status"):
            queue["status"] = status
            store.touch(queue)


def _usage(queue: dict[str, Any], used: dict[tuple[str, str], Decimal]) -> list[dict[str, Any]]:
    """A ClusterQueue's usage rows: per flavor and resource of its resourceGroups, the total and what is borrowed."""
    flavors = []
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources = []
            for resource in flavor.get("resources") or []:
                total = used.get((flavor["name"], resource["name"]), Decimal(0))
                borrowed = max(Decimal(0), total - quantity(resource.get("nominalQuota", 0)))
                resources.append({"name": resource["name"], "total": _format(total), "borrowed": _format(borrowed)})
            flavors.append({"name": flavor["name"], "resources": resources})
    return flavors


def _format(amount: Decimal) -> str:
    """A quantity as Kubernetes writes it: whole numbers plain, fractions in milli-units."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"
