"""What Kueue's controllers do in the double (its CRDs' schemas, rules and defaults are enforced by crds.py): the
status a ClusterQueue or LocalQueue gets once Kueue has seen it, the Workload made for a Job that names a
LocalQueue, and admission (quota reserved, then the Job unsuspended).

Workload conditions follow Kueue 0.19: `QuotaReserved` False with reason `Pending` and the flavor assigner's
message while it waits for quota, or reason `Inadmissible` when its LocalQueue or ClusterQueue is missing or
stopped; then `QuotaReserved` and `Admitted` True; `Evicted` True (reason `Preempted`, `InactiveWorkload`, ...)
when it is taken back.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.k8s_double.objects import BY_NAME, now_rfc3339
from tests.k8s_double.pods import _condition, _set_condition
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
    for workload in workloads_of(store, job):
        conditions = workload.setdefault("status", {}).setdefault("conditions", [])
        message = "Quota reserved in ClusterQueue cluster-queue"
        _set_condition(conditions, _condition("QuotaReserved", "True", "QuotaReserved", message, probe=False))
        _set_condition(conditions, _condition("Admitted", "True", "Admitted", "The workload is admitted", False))
        store.touch(workload)
    job["spec"]["suspend"] = False
    store.touch(job)


def evict(store: Store, namespace: str, job_name: str, reason: str, message: str) -> None:
    """Kueue takes an admitted workload back (preemption, a stopped queue): Evicted True, the Job suspended."""
    job = store.get(JOBS, namespace, job_name)
    if job is None:
        raise KeyError(job_name)
    for workload in workloads_of(store, job):
        conditions = workload.setdefault("status", {}).setdefault("conditions", [])
        _set_condition(conditions, _condition("Evicted", "True", reason, message, probe=False))
        _set_condition(conditions, _condition("QuotaReserved", "False", "Pending", message, probe=False))
        _set_condition(conditions, _condition("Admitted", "False", "NoReservation", "The workload has no reservation",
                                              False))  # fmt: skip
        store.touch(workload)
    job["spec"]["suspend"] = True
    store.touch(job)
