"""Pure reading of API objects (the JSON the API server sends) into Gridlane's JobStatus and Capacity.

The tables say what each native state means; anything they do not name is undetermined, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from fabrics.base import JobState, JobStatus, Resources
from fabrics.kubernetes import kueue_status
from fabrics.kubernetes.render import JOB_INDEX, KUEUE_QUEUE_LABEL, MANAGED_BY
from fabrics.kubernetes.settings import GpuResource

Obj = Mapping[str, Any]

# A Job condition that is True -> what the Job has become; "" stands for any other reason.
# Non-terminal types (Suspended, FailureTarget, SuccessCriteriaMet) are read elsewhere or wait for these.
JOB_CONDITIONS: Mapping[tuple[str, str], JobState] = {
    ("Complete", ""): JobState.SUCCEEDED,
    ("Failed", "DeadlineExceeded"): JobState.TIMED_OUT,
    ("Failed", ""): JobState.FAILED,
}

# A pod's phase while its Job is still going. A finished pod of an unfinished Job means the Job
# controller has not caught up yet: the work has started, so it counts as running.
POD_PHASES: Mapping[str, JobState] = {
    "Pending": JobState.QUEUED,
    "Running": JobState.RUNNING,
    "Succeeded": JobState.RUNNING,
    "Failed": JobState.RUNNING,
    "Unknown": JobState.UNDETERMINED,  # the node stopped reporting
}

# Why a container waits to start, in the submitter's words ({image} is the pod's image).
WAITING_REASONS: Mapping[str, str] = {
    "ErrImagePull": "the image {image} cannot be pulled: {message}",
    "ImagePullBackOff": "the image {image} cannot be pulled (the cluster keeps retrying): {message}",
    "InvalidImageName": "{image} is not a valid image name",
    "ErrImageNeverPull": "the image {image} is not on the node and the pod may not pull it",
    "CreateContainerConfigError": "the container cannot be set up: {message}",
    "CreateContainerError": "the container cannot be created: {message}",
    "RunContainerError": "the container cannot start: {message}",
}

# How a container ended, when the reason says more than its exit code.
TERMINATED_REASONS: Mapping[str, str] = {
    "OOMKilled": "ran out of memory (OOMKilled)",
    "Evicted": "evicted from its node",
    "DeadlineExceeded": "stopped at its deadline",
}


def job_status(
    job: Obj,
    pods: Sequence[Obj],
    *,
    podgroup: Obj | None = None,
    kueue_workload: Obj | None = None,
) -> JobStatus:
    """The Job's state from its conditions, else from its pods; reasons for whatever holds it back."""
    meta, spec, st = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    started_at = parse_time(st.get("startTime"))
    ordered = sorted(pods, key=_rank)
    host = ",".join(dict.fromkeys(p["spec"]["nodeName"] for p in ordered if (p.get("spec") or {}).get("nodeName")))
    host = host[:200]
    if meta.get("deletionTimestamp"):
        return JobStatus(JobState.CANCELLED, host=host, started_at=started_at, reason="deleted on the cluster")
    for cond in st.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        ctype, reason = str(cond.get("type", "")), str(cond.get("reason", ""))
        state = JOB_CONDITIONS.get((ctype, reason)) or JOB_CONDITIONS.get((ctype, ""))
        if state is not None:
            return _finished(state, st, cond, ordered, host, started_at)
    if spec.get("suspend"):
        return JobStatus(JobState.QUEUED, reason=_suspended_reason(job, kueue_workload))
    live = [p for p in ordered if not (p.get("metadata") or {}).get("deletionTimestamp")]
    states = [POD_PHASES.get(str((p.get("status") or {}).get("phase")), JobState.UNDETERMINED) for p in live]
    waiting = [p for p, s in zip(live, states, strict=True) if s is JobState.QUEUED]
    if JobState.RUNNING in states:
        reason = (
            f"{len(waiting)} of {len(live)} pods still wait: {pending_reason(waiting, podgroup)}" if waiting else ""
        )
        running = [p for p, s in zip(live, states, strict=True) if s is JobState.RUNNING]
        return JobStatus(
            JobState.RUNNING, host=host, started_at=started_at, reason=reason, addresses=pod_addresses(running)
        )
    if JobState.UNDETERMINED in states:
        unknown = next(p for p, s in zip(live, states, strict=True) if s is JobState.UNDETERMINED)
        phase = (unknown.get("status") or {}).get("phase")
        return JobStatus(JobState.UNDETERMINED, reason=f"pod {unknown['metadata']['name']} is in phase {phase}")
    return JobStatus(JobState.QUEUED, reason=pending_reason(waiting, podgroup))


def pod_addresses(pods: Sequence[Obj]) -> tuple[str, ...]:
    """The pods' IPs (status.podIPs, else status.podIP), each once, in the pods' order; at most 64."""
    found: dict[str, None] = {}
    for pod in pods:
        st = pod.get("status") or {}
        listed = [str(entry.get("ip") or "") for entry in st.get("podIPs") or [] if isinstance(entry, dict)]
        for ip in listed or [str(st.get("podIP") or "")]:
            if ip:
                found[ip] = None
    return tuple(found)[:64]


def finished(job: Obj) -> bool:
    """Whether a terminal condition (Complete, Failed) is True on the Job."""
    return any(
        cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed")
        for cond in (job.get("status") or {}).get("conditions") or []
    )


def _finished(
    state: JobState, st: Obj, cond: Obj, pods: Sequence[Obj], host: str, started_at: datetime | None
) -> JobStatus:
    finished_at = parse_time(st.get("completionTime")) or parse_time(cond.get("lastTransitionTime"))
    if state is JobState.SUCCEEDED:
        return JobStatus(state, exit_code=0, host=host, started_at=started_at, finished_at=finished_at)
    ended = _first_failure(pods)
    exit_code = ended.get("exitCode") if ended else None
    why = TERMINATED_REASONS.get(str(ended.get("reason"))) if ended else None
    if state is JobState.TIMED_OUT:
        reason = ""  # the worker words it from the runtime limit
    elif exit_code is None:
        reason = str(cond.get("message") or cond.get("reason") or "failed on the cluster")
    else:
        reason = f"{why} (exit code {exit_code})" if why else ""
    return JobStatus(
        state,
        exit_code=int(exit_code) if exit_code is not None else None,
        host=host,
        started_at=started_at,
        finished_at=finished_at,
        reason=reason,
    )


def _first_failure(pods: Sequence[Obj]) -> Obj | None:
    """The terminated state of the container that failed first (the cause, not ranks killed after it)."""
    failures = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated")
            if ended and ended.get("exitCode", 0) != 0:
                failures.append(ended)
    return min(failures, key=lambda t: str(t.get("finishedAt", ""))) if failures else None


def _suspended_reason(job: Obj, kueue_workload: Obj | None) -> str:
    queue = ((job.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL)
    if not queue:
        return "suspended on the cluster"
    return (
        kueue_status.pending_reason(kueue_workload, queue) or f"waiting for Kueue to admit it from LocalQueue {queue}"
    )


def pending_reason(pods: Sequence[Obj], podgroup: Obj | None = None) -> str:
    """Why pods have not started, most telling first: the gang, then images, then room on a node."""
    for cond in ((podgroup or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Unschedulable" and cond.get("status") == "True":
            return f"Volcano has not scheduled the gang yet: {cond.get('message', '')}".rstrip(": ")
    if not pods:
        return "waiting for the cluster to create its pods"
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            words = WAITING_REASONS.get(str(waiting.get("reason")))
            if words:
                message = str(waiting.get("message") or waiting.get("reason"))
                return words.format(image=cs.get("image") or _image(pod), message=message)
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                if cond.get("reason") == "Unschedulable":
                    return f"no node has room for it yet: {cond.get('message', '')}"
                return f"not scheduled yet: {cond.get('message') or cond.get('reason', '')}"
    if any((pod.get("spec") or {}).get("nodeName") for pod in pods):
        return "starting on its node"
    return "waiting to be scheduled"


def _image(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return str(containers[0].get("image", ""))


def _rank(pod: Obj) -> tuple[int, str]:
    """Rank order for Indexed Jobs' pods, then creation order."""
    index = ((pod.get("metadata") or {}).get("annotations") or {}).get(JOB_INDEX)
    meta = pod.get("metadata") or {}
    rank = int(str(index)) if str(index).isdigit() else 0
    return (rank, str(meta.get("creationTimestamp", "")) + str(meta.get("name")))


def log_pod(pods: Sequence[Obj]) -> str | None:
    """The pod whose log stands for the job (rank 0, the latest attempt); None while none has started."""
    started = [
        p
        for p in pods
        if any(
            "running" in (cs.get("state") or {}) or "terminated" in (cs.get("state") or {})
            for cs in (p.get("status") or {}).get("containerStatuses") or []
        )
    ]
    if not started:
        return None
    lowest = min(_rank(p)[0] for p in started)
    same_rank = [p for p in started if _rank(p)[0] == lowest]
    return str(max(same_rank, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))["metadata"]["name"])


def parse_time(value: Any) -> datetime | None:
    """An aware datetime from the API's RFC 3339 text ("2024-05-02T10:00:00Z"); None when absent."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


# -- capacity -------------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$")
_SUFFIXES = {
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def quantity(value: Any) -> Decimal:
    """A resource quantity ("500m", "64Gi", "8", "1e3") as a number; ValueError when it is not one."""
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    suffix = m[2] or ""
    try:
        number = Decimal(m[1])
        if suffix[:1] in ("e", "E"):
            return number * Decimal(10) ** int(suffix[1:])
        return number * _SUFFIXES.get(suffix, Decimal(1))
    except InvalidOperation as exc:
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from exc


def _amount(values: Mapping[str, Any], gpu: GpuResource) -> Resources:
    cpus = quantity(values.get("cpu", 0)) * 1000
    memory = quantity(values.get("memory", 0)) / (1 << 20)
    gpus = quantity(values.get(gpu.name, 0)) * gpu.milli_per_unit
    return Resources(int(gpus), int(cpus), int(memory))


def _pod_requests(pod: Obj, gpu: GpuResource) -> Resources:
    total = Resources()
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        # Extended resources may be given as limits only; the API server copies them to requests.
        asked = dict(resources.get("limits") or {}) | dict(resources.get("requests") or {})
        total += _amount(asked, gpu)
    return total


def _node_ready(node: Obj) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def capacity(nodes: Sequence[Obj], pods: Sequence[Obj], gpu: GpuResource) -> tuple[Resources, str]:
    """What Gridlane can count on: ready nodes' allocatable minus the requests of other people's live pods.

    Gridlane's own pods are left in: the scheduler already counts its own work against the total.
    Returns the amount and a line describing it.
    """
    ready = {n["metadata"]["name"]: n for n in nodes if _node_ready(n)}
    allocatable = Resources()
    for node in ready.values():
        allocatable += _amount((node.get("status") or {}).get("allocatable") or {}, gpu)
    others, ours = Resources(), Resources()
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") not in ready:
            continue
        if (pod.get("status") or {}).get("phase") not in ("Pending", "Running"):
            continue
        if ((pod.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == "gridlane":
            ours += _pod_requests(pod, gpu)
        else:
            others += _pod_requests(pod, gpu)
    total = allocatable - others
    total = Resources(max(0, total.gpus_milli), max(0, total.cpus_milli), max(0, total.memory_mib))
    detail = (
        f"{len(ready)} of {len(nodes)} nodes ready; {_gpus(allocatable.gpus_milli)} GPUs ({gpu.name}) allocatable, "
        f"{_gpus(others.gpus_milli)} held by pods outside Gridlane, {_gpus(ours.gpus_milli)} by Gridlane's"
    )
    return total, detail


def _gpus(milli: int) -> str:
    return f"{milli // 1000}.{milli % 1000:03d}".rstrip("0").rstrip(".")
