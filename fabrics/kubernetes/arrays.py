"""An array on Kubernetes: the elements of one array that Gridlane admitted together run as one Indexed Job. Pure.

    the Job     gla-<workload id of its first element>; completions == parallelism == the elements in it, so
                Kubernetes starts exactly what Gridlane admitted, never a next element on its own (a Job covering
                the whole array would start index k+1 the moment index k ends, before policy had said so);
                backoffLimitPerIndex 0: an element that fails fails alone and is never retried behind Gridlane
    elements    completion index k runs the k-th element of the group; the annotation gridlane.io/elements lists
                their workload ids in index order, so a dispatch that crashed before recording finds them by the
                array's label; an element's external id is <job name>/<k>
    environment a Secret of the Job's name holds each element's own variables (GRIDLANE_ARRAY_INDEX,
                GRIDLANE_WORKLOAD_ID, its report URL and secret) as the shell file <k>; the container runs
                `. <dir>/$JOB_COMPLETION_INDEX` and then the queue template's command, argv unchanged
    cancel      of one element: the Job is annotated gridlane.io/cancel-<k> first (its failure then reads as a
                cancel), then its pod is deleted, which fails its index for good; of every element: the Job goes

Only single-node batch and training elements of Gridlane's own command go this way; the rest (a gang per
element, a user's manifest, Volcano's PodGroups) keep one Job per element.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any
from uuid import UUID

from fabrics.base import JobSpec, JobState, JobStatus
from fabrics.kubernetes import parse, render
from fabrics.kubernetes.render import JOB_INDEX, WORKLOAD_LABEL, Manifests
from fabrics.kubernetes.settings import KubeSettings
from fabrics.ssh import notebook

ARRAY_LABEL = "gridlane.io/array-id"  # the parent workload's id, on every Job of the array and its pods
ARRAY_JOB_LABEL = "gridlane.io/array-job"  # the Job's own name, on it and its pods
ELEMENTS = "gridlane.io/elements"  # the elements' workload ids, in completion-index order
CANCEL = "gridlane.io/cancel-"  # + k: Gridlane cancelled index k
PREFIX = "gla-"
ENV_DIR = "/var/run/gridlane/array"
VOLUME = "gridlane-array"
# Sources the element's own variables, then runs the template's command with the same argv ("$@").
WRAPPER = f'. "{ENV_DIR}/$JOB_COMPLETION_INDEX" && exec "$@"'
# Always in the element's own file (its secret too, kept out of the pod spec); so is whatever differs between them.
OWN_ENV = frozenset({"GRIDLANE_WORKLOAD_ID", "GRIDLANE_ARRAY_INDEX"}) | notebook.SECRET_ENV


def eligible(job: JobSpec, settings: KubeSettings) -> bool:
    """Whether this array element can share an Indexed Job with its siblings."""
    return bool(
        job.array_id
        and job.nodes == 1
        and job.kind in ("batch", "training")
        and not job.script
        and not settings.volcano
    )


def job_name(first: UUID) -> str:
    """`gla-<workload id>`: 40 characters, so pod hostnames (<job>-<index>) stay DNS labels."""
    return f"{PREFIX}{first}"


def external_id(name: str, index: int) -> str:
    return f"{name}/{index}"


def element_of(external: str) -> tuple[str, int] | None:
    """(job name, completion index) from an element's external id; None for any other id."""
    name, slash, index = external.partition("/")
    if not slash or not name.startswith(PREFIX) or not index.isdigit():
        return None
    return name, int(index)


def groups(jobs: Sequence[JobSpec]) -> list[list[JobSpec]]:
    """Elements that can run as one Job: the same array and the same request, in the order given."""
    out: dict[tuple[str, str], list[JobSpec]] = {}
    for job in jobs:
        out.setdefault((job.array_id, repr(_shared(job))), []).append(job)
    return list(out.values())


def _shared(job: JobSpec) -> JobSpec:
    """What every element of one Job has in common: the spec less its own id, name, index and environment."""
    return replace(job, workload_id=UUID(int=0), name="", env={}, array="")


def elements(job: Mapping[str, Any]) -> list[UUID]:
    """The workload ids a Job runs, by completion index; [] when the annotation is missing or unreadable."""
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(ELEMENTS, "")
    try:
        return [UUID(part) for part in str(text).split(",") if part]
    except ValueError:
        return []


def render_group(jobs: Sequence[JobSpec], settings: KubeSettings, namespace: str) -> Manifests:
    """The Indexed Job and its Secret for these elements of one array (see `groups`); TemplateError as render's."""
    first = jobs[0]
    envs = [dict(job.env) | {"GRIDLANE_WORKLOAD_ID": str(job.workload_id)} for job in jobs]
    own = {key for key in set().union(*envs) if key in OWN_ENV or len({env.get(key) for env in envs}) > 1}
    common = {key: value for key, value in envs[0].items() if key not in own}
    base = render.render(replace(first, env=common), settings, namespace)
    name = job_name(first.workload_id)
    labels = {k: v for k, v in base.job["metadata"]["labels"].items() if k != WORKLOAD_LABEL}
    labels |= {ARRAY_LABEL: first.array_id, ARRAY_JOB_LABEL: name}
    job = base.job
    job["metadata"] |= {"name": name, "labels": labels}
    job["metadata"]["annotations"] = {
        "gridlane.io/owner": first.owner,
        "gridlane.io/name": first.name.rsplit("[", 1)[0],
        ELEMENTS: ",".join(str(j.workload_id) for j in jobs),
    }
    spec = job["spec"]
    spec.pop("backoffLimit", None)  # each index has its own (0): one element's failure is its own
    spec |= {"completionMode": "Indexed", "completions": len(jobs), "parallelism": len(jobs), "backoffLimitPerIndex": 0}
    pod_meta = spec["template"]["metadata"]
    pod_meta["labels"] = {k: v for k, v in pod_meta["labels"].items() if k != WORKLOAD_LABEL}
    pod_meta["labels"] |= {ARRAY_LABEL: first.array_id, ARRAY_JOB_LABEL: name}
    pod = spec["template"]["spec"]
    containers = pod["containers"]
    main = next((c for c in containers if c.get("name") == "main"), containers[0])
    main["env"] = [e for e in main["env"] if e.get("name") not in own]
    main["command"] = ["/bin/sh", "-c", WRAPPER, "gridlane-array", *main["command"]]
    main["volumeMounts"] = [*(main.get("volumeMounts") or []), {"name": VOLUME, "mountPath": ENV_DIR, "readOnly": True}]
    pod["volumes"] = [*(pod.get("volumes") or []), {"name": VOLUME, "secret": {"secretName": name}}]
    files = {str(k): _env_file({key: env[key] for key in sorted(own) if key in env}) for k, env in enumerate(envs)}
    secret_meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace:
        secret_meta["namespace"] = namespace
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": secret_meta, "type": "Opaque", "stringData": files}
    return Manifests(job, secret=secret)


def _env_file(env: Mapping[str, str]) -> str:
    """`export NAME='value'` lines: values are data, quoted, never code."""
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())


# -- status ---------------------------------------------------------------------------------------


def indexes(text: Any) -> set[int]:
    """ "0-2,5" (completedIndexes, failedIndexes) -> {0, 1, 2, 5}; an unreadable part is left out."""
    out: set[int] = set()
    for part in str(text or "").split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            out.update(range(int(low), int(high or low) + 1))
    return out


def element_status(job: Mapping[str, Any], index: int, pods: Sequence[Mapping[str, Any]]) -> JobStatus:
    """The state of the element at this completion index, from its Job's status and its own pods."""
    meta, st = job.get("metadata") or {}, job.get("status") or {}
    mine = [p for p in pods if ((p.get("metadata") or {}).get("annotations") or {}).get(JOB_INDEX) == str(index)]
    started = _started(mine)
    if meta.get("deletionTimestamp"):
        return JobStatus(JobState.CANCELLED, started_at=started, reason="deleted on the cluster")
    cancelled = f"{CANCEL}{index}" in (meta.get("annotations") or {})
    if index in indexes(st.get("completedIndexes")):
        return _ended(JobState.SUCCEEDED, mine, started, exit_code=0)
    if index in indexes(st.get("failedIndexes")):
        return _ended(JobState.CANCELLED if cancelled else JobState.FAILED, mine, started)
    if parse.finished(job):  # ended before this index did: its deadline, or too many failed indexes
        whole = parse.job_status(job, mine)
        if cancelled and whole.state is not JobState.SUCCEEDED:
            return JobStatus(JobState.CANCELLED, host=whole.host, started_at=started, finished_at=whole.finished_at)
        return replace(whole, started_at=started or whole.started_at)
    running = dict(job) | {"status": {k: v for k, v in st.items() if k != "conditions"}}
    status = parse.job_status(running, mine)
    return replace(status, started_at=started) if started and status.state is JobState.RUNNING else status


def _started(pods: Sequence[Mapping[str, Any]]) -> datetime | None:
    times = [t for p in pods if (t := parse.parse_time((p.get("status") or {}).get("startTime"))) is not None]
    return min(times) if times else None


def _ended(
    state: JobState, pods: Sequence[Mapping[str, Any]], started: datetime | None, exit_code: int | None = None
) -> JobStatus:
    """A finished element, with its exit code and end time from its last pod's container."""
    last: Mapping[str, Any] = {}
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated")
            if ended and str(ended.get("finishedAt", "")) >= str(last.get("finishedAt", "")):
                last = ended
    code = exit_code if exit_code is not None else last.get("exitCode")
    why = parse.TERMINATED_REASONS.get(str(last.get("reason")))
    reason = ""
    if state is JobState.CANCELLED:
        reason = "cancelled on the cluster"
    elif state is JobState.FAILED:
        reason = f"{why} (exit code {code})" if why else ("" if code is not None else "its pod was deleted")
    host = ",".join(dict.fromkeys(str(p["spec"]["nodeName"]) for p in pods if (p.get("spec") or {}).get("nodeName")))
    return JobStatus(
        state,
        exit_code=int(code) if code is not None else None,
        host=host,
        started_at=started,
        finished_at=parse.parse_time(last.get("finishedAt")),
        reason=reason,
    )


def live_pods(pods: Sequence[Mapping[str, Any]], index: int) -> list[str]:
    """Names of the pods of this index that still run or wait (and are not being deleted already)."""
    return [
        str(p["metadata"]["name"])
        for p in pods
        if (p["metadata"].get("annotations") or {}).get(JOB_INDEX) == str(index)
        and (p.get("status") or {}).get("phase") in ("Pending", "Running")
        and not p["metadata"].get("deletionTimestamp")
    ]


def all_cancelled(job: Mapping[str, Any]) -> bool:
    """Whether Gridlane cancelled every index of the Job (then the Job itself can go)."""
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    completions = int((job.get("spec") or {}).get("completions") or 0)
    return all(f"{CANCEL}{k}" in annotations for k in range(completions))
